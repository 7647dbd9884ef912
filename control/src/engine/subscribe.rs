//! A worker's load sockets: for a record that names rank 0's (`load_events`), one task per DP
//! rank following `port + rank` (SGLang's layout: `resolve_load_pub_range` in SGLang 0.5.23
//! `python/sglang/srt/disaggregation/kv_events.py`), each `LoadStat` written to the board as it
//! arrives.

use std::sync::Arc;
use std::time::Instant;

use infera_kv::load::follow_load;
use infera_proto::types::{DpRank, Target, WorkerRecord, load_endpoint_for_rank};
use tokio::task::JoinHandle;

use super::EngineBoard;

/// One subscriber per rank of `record`'s load socket (none when it names none).
pub(super) fn spawn(record: &WorkerRecord, board: &Arc<EngineBoard>) -> Vec<JoinHandle<()>> {
    let Some(base) = &record.load_events else { return Vec::new() };
    let mut tasks = Vec::with_capacity(record.dp_size as usize);
    for rank in 0..record.dp_size {
        let endpoint = match load_endpoint_for_rank(base, rank) {
            Ok(endpoint) => endpoint,
            Err(why) => {
                tracing::warn!(worker = %record.id, rank, endpoint = base, why, "not following the load socket");
                continue;
            }
        };
        let target = Target::new(record.id.clone(), DpRank(rank));
        let board = board.clone();
        tracing::debug!(worker = %record.id, rank, endpoint, "following the load socket");
        tasks.push(tokio::spawn(follow_load(endpoint, move |m| {
            board.put_stat(target.clone(), &m.stat, Instant::now());
        })));
    }
    tasks
}

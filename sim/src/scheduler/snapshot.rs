//! What the core reports about each rank: the counters of `/v1/loads` and the step formula's
//! inputs.

use super::types::{RankSnapshot, ReqId};
use super::{Req, Scheduler};
use crate::timing::RankLoad;

impl Scheduler {
    /// Per-rank counters.
    pub fn snapshot(&self) -> Vec<RankSnapshot> {
        self.ranks
            .iter()
            .map(|r| {
                let context = |ids: &mut dyn Iterator<Item = &ReqId>| -> u64 {
                    ids.filter_map(|id| self.reqs.get(id)).map(Req::context).sum()
                };
                let batch: Vec<ReqId> =
                    r.batch.iter().flat_map(|b| b.parts.iter().map(|(id, _)| *id)).collect();
                let prealloc = context(&mut r.prealloc.iter());
                let retracted = context(&mut r.retracted.iter());
                let awaiting_transfer = match self.decode_role {
                    true => context(&mut r.transfer.iter()),
                    false => 0,
                };
                RankSnapshot {
                    running: (r.running.len() + r.stalled.len() + batch.len()) as u32,
                    waiting: r.waiting.len() as u32,
                    waiting_uncached_tokens: r.waiting.iter().map(|w| u64::from(w.estimate)).sum(),
                    transfer: r.transfer.len() as u32,
                    prealloc: r.prealloc.len() as u32,
                    retracted: r.retracted.len() as u32,
                    retracted_last: r.retracted_logged,
                    prealloc_tokens: prealloc,
                    pending_tokens: prealloc + retracted,
                    awaiting_kv_tokens: prealloc + awaiting_transfer,
                    used_tokens: self.used(r),
                    cached_tokens: r.cache.tokens(),
                    decode_moments: r.moments.reported(),
                }
            })
            .collect()
    }

    /// The decode load of each rank, as the step formula sees it.
    pub fn rank_loads(&self) -> Vec<RankLoad> {
        self.ranks
            .iter()
            .map(|r| RankLoad {
                requests: r.running.len() as u32,
                context_tokens: r.running.iter().filter_map(|id| self.reqs.get(id)).map(Req::context).sum(),
            })
            .collect()
    }
}

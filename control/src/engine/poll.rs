//! One worker's poller: `GET {url}/v1/loads?include=core,disagg` every interval, each answer
//! replacing the worker's readings on the board. A worker that does not answer keeps its last
//! readings, which age (`Admin/ListTargets` shows how old); the first failure and the recovery
//! are logged once each. Each answer is also one reading of the worker's W fit
//! ([`crate::fit::WeightFits`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use infera_proto::types::WorkerRecord;

use super::EngineBoard;
use super::loads;
use crate::fit::{RankReading, WeightFits, WorkerReading};

/// An answer larger than this is not a `/v1/loads` answer (a 64-rank worker answers ~40 KiB).
const MAX_BODY: usize = 4 << 20;

/// Why one poll gave no reading.
#[derive(Debug, thiserror::Error)]
enum PollError {
    #[error("{0}")]
    Http(String),
    #[error("status {0}")]
    Status(http::StatusCode),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Body(#[from] loads::LoadsError),
}

pub(super) async fn run(
    record: WorkerRecord,
    interval: Duration,
    board: Arc<EngineBoard>,
    fits: Arc<WeightFits>,
    connector: infera_runtime::serve::worker_client::WorkerConnector,
) {
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let url = format!("{}/v1/loads?include=core,disagg", record.url.trim_end_matches('/'));
    let Ok(uri) = url.parse::<http::Uri>() else {
        tracing::warn!(worker = %record.id, url, "not polling engine loads: the worker URL does not parse");
        return;
    };
    // An answer may take longer than one interval on a loaded engine; not longer than a second.
    let timeout = interval.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut failing = false;
    loop {
        tick.tick().await;
        let sent = Instant::now();
        match fetch(&client, uri.clone(), timeout).await {
            Ok(ranks) => {
                let at = Instant::now();
                let reading = WorkerReading {
                    at,
                    ranks: ranks
                        .iter()
                        .map(|r| RankReading {
                            rank: r.rank,
                            moments: r.moments,
                            used_tokens: r.load.used_tokens,
                            running: r.load.running,
                        })
                        .collect(),
                };
                fits.observe(&record, reading);
                board.put(&record.id, record.dp_size, &ranks, sent, at);
                if std::mem::take(&mut failing) {
                    tracing::info!(worker = %record.id, "engine loads readable again");
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(worker = %record.id, error = %e, "cannot read the engine's /v1/loads");
                }
            }
        }
    }
}

async fn fetch(
    client: &Client<infera_runtime::serve::worker_client::WorkerConnector, Empty<Bytes>>,
    uri: http::Uri,
    timeout: Duration,
) -> Result<Vec<loads::RankAnswer>, PollError> {
    let answer = async {
        let resp = client.get(uri).await.map_err(|e| PollError::Http(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(PollError::Status(resp.status()));
        }
        let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY);
        body.collect().await.map(|c| c.to_bytes()).map_err(|e| PollError::Http(e.to_string()))
    };
    let body = tokio::time::timeout(timeout, answer).await.map_err(|_| PollError::Timeout(timeout))??;
    Ok(loads::parse(&body)?)
}

//! DP-size discovery: a worker whose record leaves out `dp_size` is asked for it on its
//! `GET /server_info` before it becomes a routing target. A record that gives `dp_size` is
//! authoritative and never asked.
//!
//! ```text
//! registry change (no dp_size) ──▶ Discovery::start ──▶ task: GET {url}/server_info
//!        ▲ retry with backoff (100 ms … 5 s) ◀── unanswered / malformed / invalid
//!        └ answered: ranks ──▶ deliver(record with dp_size) ──▶ the view, KV feed, engine readers
//! ```
//!
//! Until then the worker has no targets. Each failure is logged (on the first one and when the
//! reason changes) and counted in `infera_router_dp_size_discovery_failures_total{worker,reason}`;
//! `infera_router_workers_awaiting_dp_size` counts the workers still waiting. A worker's failures
//! touch no other worker: each one has its own task. A newer record or the worker's removal
//! cancels its task, and a delivery of a cancelled task is dropped (generations).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use infera_proto::types::{RegisteredWorker, WorkerId, WorkerRecord};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use tokio::task::JoinHandle;

/// One `/server_info` attempt may take this long (it asks every scheduler for its state).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// The first retry's wait; each failure doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// An answer larger than this is not a `/server_info` answer.
const MAX_BODY: usize = 8 << 20;

/// A `/server_info` body that does not say how many DP ranks the worker has.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedServerInfo {
    /// Not a JSON object.
    #[error("the answer is not a JSON object")]
    NotAnObject,
    /// No `dp_size` key.
    #[error("the answer has no dp_size")]
    NoDpSize,
    /// `dp_size` or `attn_dp_size` is not a whole number ≥ 1 that fits a u32.
    #[error("{key} is {value}, not a whole number of at least 1")]
    NotASize {
        /// `dp_size` or `attn_dp_size`.
        key: &'static str,
        /// The value as the worker sent it.
        value: String,
    },
    /// `dp_size × attn_dp_size` does not fit a u32.
    #[error("dp_size {dp_size} × attn_dp_size {attn_dp_size} is too large")]
    TooLarge {
        /// Replicas (or, before SGLang 0.5.22, attention-DP ranks).
        dp_size: u32,
        /// Attention-DP ranks (SGLang 0.5.22+).
        attn_dp_size: u32,
    },
}

/// The DP ranks a `/server_info` answer describes: `dp_size × attn_dp_size`.
///
/// SGLang 0.5.22+ reports replicas in `dp_size` and attention-DP ranks in `attn_dp_size` (the
/// deprecated `--dp-size N --enable-dp-attention` resolves to `attn_dp_size = N, dp_size = 1`),
/// and routes `routed_dp_rank` over `num_dp_ranks = dp_size × attn_dp_size`
/// (`sglang/srt/runtime_context.py`); before 0.5.22 there is no `attn_dp_size` and `dp_size` is
/// the rank count either way.
///
/// # Errors
/// When the body does not give the count.
pub fn ranks_of(body: &[u8]) -> Result<u32, MalformedServerInfo> {
    let info: Value = serde_json::from_slice(body).map_err(|_| MalformedServerInfo::NotAnObject)?;
    let info = info.as_object().ok_or(MalformedServerInfo::NotAnObject)?;
    let size = |key: &'static str| -> Result<Option<u32>, MalformedServerInfo> {
        let Some(v) = info.get(key).filter(|v| !v.is_null()) else { return Ok(None) };
        let n = v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n >= 1);
        n.map(Some).ok_or_else(|| MalformedServerInfo::NotASize { key, value: v.to_string() })
    };
    let dp_size = size("dp_size")?.ok_or(MalformedServerInfo::NoDpSize)?;
    let attn_dp_size = size("attn_dp_size")?.unwrap_or(1);
    dp_size.checked_mul(attn_dp_size).ok_or(MalformedServerInfo::TooLarge { dp_size, attn_dp_size })
}

/// Why one discovery attempt gave no size (the log names the worker and its URL).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// `{url}/server_info` is not a URI.
    #[error("{url}/server_info is not a URI: {source}")]
    BadUrl {
        /// The record's URL.
        url: String,
        /// Why it does not parse.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The worker did not answer (connect error, broken connection).
    #[error("no answer: {0}")]
    Unreachable(#[source] hyper_util::client::legacy::Error),
    /// The body could not be read (hyper's error and the size limit's differ in type).
    #[error("reading the answer: {0}")]
    Body(String),
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// An answer that is not 2xx.
    #[error("status {0}")]
    Status(http::StatusCode),
    /// A 2xx answer that does not give the size.
    #[error(transparent)]
    Malformed(MalformedServerInfo),
    /// A size the record cannot take (its KV-event or load ports + rank past 65535).
    #[error("dp_size {dp_size} does not fit the record: {problem}")]
    Invalid {
        /// The size the worker reported.
        dp_size: u32,
        /// What the record's check said.
        problem: &'static str,
    },
}

impl DiscoveryError {
    /// The `reason` label: `unanswered` (the worker may still be starting), `malformed` (it
    /// answered without a usable size) or `invalid` (the size does not fit its record, or its URL
    /// cannot be asked).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unreachable(_) | Self::Body(_) | Self::Timeout(_) | Self::Status(_) => "unanswered",
            Self::Malformed(_) => "malformed",
            Self::Invalid { .. } | Self::BadUrl { .. } => "invalid",
        }
    }
}

/// The labels of a failed attempt.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabels {
    worker: String,
    reason: &'static str,
}

/// The discovery's metrics (the control metrics register them).
#[derive(Clone, Debug, Default)]
pub struct DiscoveryMetrics {
    /// `infera_router_workers_awaiting_dp_size`.
    pub(crate) awaiting: Gauge,
    /// `infera_router_dp_size_discovery_failures_total{worker, reason}`.
    pub(crate) failures: Family<FailureLabels, Counter>,
}

impl DiscoveryMetrics {
    fn failed(&self, worker: &WorkerId, e: &DiscoveryError) {
        let labels = FailureLabels { worker: worker.to_string(), reason: e.reason() };
        self.failures.get_or_create(&labels).inc();
    }
}

/// Hands a discovered worker over (to the view); the `u64` is the attempt's generation.
pub type Deliver = Box<dyn FnOnce(u64, WorkerRecord) + Send>;

#[derive(Debug)]
struct Pending {
    generation: u64,
    task: JoinHandle<()>,
}

/// The workers being asked for their DP size, one task each.
#[derive(Debug)]
pub struct Discovery {
    pending: HashMap<WorkerId, Pending>,
    next_generation: u64,
    client: Client<HttpConnector, Empty<Bytes>>,
    metrics: DiscoveryMetrics,
}

impl Discovery {
    /// No worker asked yet.
    pub fn new(metrics: DiscoveryMetrics) -> Self {
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self { pending: HashMap::new(), next_generation: 0, client, metrics }
    }

    /// Asks `registered`'s `/server_info` until it gives the size, then calls `deliver` with
    /// this attempt's generation (stopping an earlier attempt for the same worker).
    pub fn start(&mut self, registered: RegisteredWorker, deliver: Deliver) {
        self.cancel(&registered.id);
        let generation = self.next_generation;
        self.next_generation += 1;
        let id = registered.id.clone();
        let ask = Asker { client: self.client.clone(), metrics: self.metrics.clone() };
        let task = tokio::spawn(async move {
            let record = ask.until_sized(registered).await;
            deliver(generation, record);
        });
        self.pending.insert(id, Pending { generation, task });
        self.export();
    }

    /// Stops asking `worker` (removed, or registered again); `false` when it was not asked.
    pub fn cancel(&mut self, worker: &WorkerId) -> bool {
        let Some(p) = self.pending.remove(worker) else { return false };
        p.task.abort();
        self.export();
        true
    }

    /// Takes the delivery of `worker`'s attempt `generation`: `true` when that attempt is still
    /// the current one (and the worker is no longer pending), `false` when it was superseded.
    pub fn finish(&mut self, worker: &WorkerId, generation: u64) -> bool {
        if self.pending.get(worker).is_none_or(|p| p.generation != generation) {
            return false;
        }
        self.pending.remove(worker);
        self.export();
        true
    }

    fn export(&self) {
        self.metrics.awaiting.set(i64::try_from(self.pending.len()).unwrap_or(i64::MAX));
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.pending.values().for_each(|p| p.task.abort());
    }
}

/// What one worker's task holds.
struct Asker {
    client: Client<HttpConnector, Empty<Bytes>>,
    metrics: DiscoveryMetrics,
}

impl Asker {
    /// Asks until the worker answers with a size its record can take.
    async fn until_sized(&self, registered: RegisteredWorker) -> WorkerRecord {
        let id = &registered.id;
        let mut backoff = FIRST_BACKOFF;
        let mut last_reason = None;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let result = self.ask(&registered.url).await.and_then(|dp_size| {
                let record = registered.clone().with_discovered_ranks(dp_size);
                record
                    .check()
                    .map(|()| record)
                    .map_err(|problem| DiscoveryError::Invalid { dp_size, problem })
            });
            let e = match result {
                Ok(record) => {
                    tracing::info!(worker = %id, ranks = record.dp_size, attempts, "dp_size discovered from /server_info");
                    return record;
                }
                Err(e) => e,
            };
            self.metrics.failed(id, &e);
            if last_reason.replace(e.reason()) != Some(e.reason()) {
                if e.reason() == "unanswered" {
                    tracing::warn!(worker = %id, url = %registered.url, error = %e, retry_in = ?backoff, "dp_size unknown: /server_info does not answer yet; not routable, retrying");
                } else {
                    tracing::error!(worker = %id, url = %registered.url, error = %e, retry_in = ?backoff, "dp_size unknown: /server_info's answer is unusable; not routable, retrying");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One attempt: the ranks `GET {url}/server_info` reports.
    async fn ask(&self, url: &str) -> Result<u32, DiscoveryError> {
        let uri: http::Uri = format!("{}/server_info", url.trim_end_matches('/'))
            .parse()
            .map_err(|source| DiscoveryError::BadUrl { url: url.to_owned(), source })?;
        let answer = async {
            let resp = self.client.get(uri).await.map_err(DiscoveryError::Unreachable)?;
            if !resp.status().is_success() {
                return Err(DiscoveryError::Status(resp.status()));
            }
            let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY);
            body.collect().await.map(|c| c.to_bytes()).map_err(|e| DiscoveryError::Body(e.to_string()))
        };
        let body = tokio::time::timeout(ANSWER_TIMEOUT, answer)
            .await
            .map_err(|_| DiscoveryError::Timeout(ANSWER_TIMEOUT))??;
        ranks_of(&body).map_err(DiscoveryError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranks_are_replicas_times_attention_groups() {
        assert_eq!(ranks_of(br#"{"dp_size": 8, "enable_dp_attention": true}"#), Ok(8), "SGLang ≤ 0.5.21");
        assert_eq!(ranks_of(br#"{"dp_size": 1, "attn_dp_size": 8}"#), Ok(8), "0.5.22+ attention DP");
        assert_eq!(ranks_of(br#"{"dp_size": 4, "attn_dp_size": 1}"#), Ok(4), "0.5.22+ replicas");
    }

    #[test]
    fn malformed_answers_say_what_is_wrong() {
        assert_eq!(ranks_of(b"<html>"), Err(MalformedServerInfo::NotAnObject));
        assert_eq!(ranks_of(b"[8]"), Err(MalformedServerInfo::NotAnObject));
        assert_eq!(ranks_of(br#"{"tp_size": 8}"#), Err(MalformedServerInfo::NoDpSize));
        assert_eq!(ranks_of(br#"{"dp_size": null}"#), Err(MalformedServerInfo::NoDpSize));
        for (body, key, value) in [
            (r#"{"dp_size": "eight"}"#, "dp_size", r#""eight""#),
            (r#"{"dp_size": 0}"#, "dp_size", "0"),
            (r#"{"dp_size": 2.5}"#, "dp_size", "2.5"),
            (r#"{"dp_size": -1}"#, "dp_size", "-1"),
            (r#"{"dp_size": 1, "attn_dp_size": 0}"#, "attn_dp_size", "0"),
        ] {
            assert_eq!(
                ranks_of(body.as_bytes()),
                Err(MalformedServerInfo::NotASize { key, value: value.to_owned() }),
                "{body}"
            );
        }
        let huge = format!(r#"{{"dp_size": {}, "attn_dp_size": 2}}"#, u32::MAX);
        assert!(matches!(ranks_of(huge.as_bytes()), Err(MalformedServerInfo::TooLarge { .. })));
    }
}

//! Asking workers for their engine facts: every registered worker's `GET /server_info` is read
//! before it becomes a routing target, and the record is reconciled with it
//! ([`super::reconcile`]).
//!
//! ```text
//! registry change ──▶ Discovery::start ──▶ task: GET {url}/server_info ──▶ parse ──▶ reconcile
//!        ▲ retry with backoff (100 ms … 5 s) ◀── unanswered / malformed / invalid / held out
//!        └ answered: the worker ──▶ deliver(record) ──▶ the view, KV feed, engine readers
//! ```
//!
//! Until then the worker has no targets. Each failure is logged (on the first one and when the
//! reason changes) and counted in `infera_router_engine_facts_failures_total{worker,reason}`;
//! `infera_router_workers_awaiting_engine_facts` counts the workers still waiting. A record field
//! the engine contradicts is logged once per answer and counted in
//! `infera_router_record_mismatches_total{worker,field}`. A worker's failures touch no other
//! worker: each one has its own task. A newer record or the worker's removal cancels its task,
//! and a delivery of a cancelled task is dropped (generations).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use infera_proto::types::{RegisteredWorker, WorkerId, WorkerRecord};
use infera_runtime::serve::worker_client::WorkerConnector;

use super::{HeldOut, MalformedServerInfo, Reconciled, RecordMismatch};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::task::JoinHandle;

/// One `/server_info` attempt may take this long (it asks every scheduler for its state).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// The first retry's wait; each failure doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// An answer larger than this is not a `/server_info` answer.
const MAX_BODY: usize = 8 << 20;

/// Why one attempt gave no routable worker (the log names the worker and its URL).
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
    /// A 2xx answer that does not give the facts.
    #[error(transparent)]
    Malformed(MalformedServerInfo),
    /// The engine is not the worker the record describes (another model or role).
    #[error(transparent)]
    HeldOut(HeldOut),
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
    /// answered without usable facts), `invalid` (its size does not fit its record, or its URL
    /// cannot be asked), `model_mismatch` or `role_mismatch` (its engine serves another model or
    /// runs another role than the record says).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unreachable(_) | Self::Body(_) | Self::Timeout(_) | Self::Status(_) => "unanswered",
            Self::Malformed(_) => "malformed",
            Self::HeldOut(h) => h.reason(),
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

/// The labels of a record field the engine contradicted.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MismatchLabels {
    worker: String,
    field: &'static str,
}

/// The discovery's metrics (the control metrics register them).
#[derive(Clone, Debug, Default)]
pub struct DiscoveryMetrics {
    /// `infera_router_workers_awaiting_engine_facts`.
    pub(crate) awaiting: Gauge,
    /// `infera_router_engine_facts_failures_total{worker, reason}`.
    pub(crate) failures: Family<FailureLabels, Counter>,
    /// `infera_router_record_mismatches_total{worker, field}`.
    pub(crate) mismatches: Family<MismatchLabels, Counter>,
}

impl DiscoveryMetrics {
    fn failed(&self, worker: &WorkerId, e: &DiscoveryError) {
        let labels = FailureLabels { worker: worker.to_string(), reason: e.reason() };
        self.failures.get_or_create(&labels).inc();
    }

    fn mismatched(&self, worker: &WorkerId, m: &RecordMismatch) {
        let labels = MismatchLabels { worker: worker.to_string(), field: m.field };
        self.mismatches.get_or_create(&labels).inc();
    }
}

/// Hands a discovered worker over (to the view); the `u64` is the attempt's generation.
pub type Deliver = Box<dyn FnOnce(u64, WorkerRecord) + Send>;

#[derive(Debug)]
struct Pending {
    generation: u64,
    task: JoinHandle<()>,
}

/// The workers being asked for their engine facts, one task each.
#[derive(Debug)]
pub struct Discovery {
    pending: HashMap<WorkerId, Pending>,
    next_generation: u64,
    client: Client<WorkerConnector, Empty<Bytes>>,
    metrics: DiscoveryMetrics,
}

impl Discovery {
    /// No worker asked yet; workers reached with `connector` (`https://` over TLS).
    pub fn new(metrics: DiscoveryMetrics, connector: WorkerConnector) -> Self {
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Self { pending: HashMap::new(), next_generation: 0, client, metrics }
    }

    /// Asks `registered`'s `/server_info` until its facts make it routable, then calls `deliver`
    /// with this attempt's generation (stopping an earlier attempt for the same worker).
    pub fn start(&mut self, registered: RegisteredWorker, deliver: Deliver) {
        self.cancel(&registered.id);
        let generation = self.next_generation;
        self.next_generation += 1;
        let id = registered.id.clone();
        let ask = Asker { client: self.client.clone(), metrics: self.metrics.clone() };
        let task = tokio::spawn(async move {
            let record = ask.until_routable(registered).await;
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

    /// Workers whose engine facts are still being asked for.
    pub fn awaiting(&self) -> usize {
        self.pending.len()
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
    client: Client<WorkerConnector, Empty<Bytes>>,
    metrics: DiscoveryMetrics,
}

impl Asker {
    /// Asks until the worker's engine answers with facts that make its record routable.
    async fn until_routable(&self, registered: RegisteredWorker) -> WorkerRecord {
        let id = &registered.id;
        let mut backoff = FIRST_BACKOFF;
        let mut last_reason = None;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let result = self.ask(&registered.url).await.and_then(|facts| {
                let Reconciled { record, mismatches } =
                    super::reconcile(registered.clone(), &facts).map_err(DiscoveryError::HeldOut)?;
                record
                    .check()
                    .map(|()| (record, mismatches))
                    .map_err(|problem| DiscoveryError::Invalid { dp_size: facts.ranks, problem })
            });
            let e = match result {
                Ok((record, mismatches)) => {
                    for m in &mismatches {
                        self.metrics.mismatched(id, m);
                        tracing::warn!(worker = %id, field = m.field, record = %m.record, engine = %m.engine,
                            "the worker's record disagrees with its engine's /server_info; routing with the engine's value");
                    }
                    tracing::info!(worker = %id, ranks = record.dp_size, page_size = record.page_size,
                        transfer_backend = record.transfer_backend.as_deref().unwrap_or("unknown"),
                        kv_cache_dtype = record.kv_cache_dtype.as_deref().unwrap_or("unknown"),
                        attempts, "engine facts read from /server_info");
                    return record;
                }
                Err(e) => e,
            };
            self.metrics.failed(id, &e);
            if last_reason.replace(e.reason()) != Some(e.reason()) {
                if e.reason() == "unanswered" {
                    tracing::warn!(worker = %id, url = %registered.url, error = %e, retry_in = ?backoff, "engine facts unknown: /server_info does not answer yet; not routable, retrying");
                } else {
                    tracing::error!(worker = %id, url = %registered.url, error = %e, retry_in = ?backoff, "held out of routing: /server_info's answer does not fit the worker's record; retrying");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One attempt: the facts `GET {url}/server_info` reports.
    async fn ask(&self, url: &str) -> Result<super::EngineFacts, DiscoveryError> {
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
        super::parse(&body).map_err(DiscoveryError::Malformed)
    }
}

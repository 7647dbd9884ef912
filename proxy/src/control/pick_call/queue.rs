//! Picks on their way to control, coalesced: the picks asked while the tasks that were ready ran
//! go out in one `PickMany` (group commit, as the release outbox does for releases). Nothing
//! waits for a timer: at low load a batch is one pick, sent as `PickPrefill` or `PickDecode`
//! after one pass of the runtime's ready tasks; under load the requests that arrive together are
//! picked together, one gRPC call (and one control wake-up) for all of them. Control answers
//! them in order, each as the unary call would, so the batch changes how picks travel and never
//! what they pick.
//!
//! A control older than `PickMany` answers UNIMPLEMENTED: that batch goes out one unary call per
//! pick, and so does every batch for the next minute, when `PickMany` is tried again (the replica
//! may have been upgraded).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use infera_proto::error::StatusReason;
use infera_proto::pb::{self, pick_result::Outcome, router_client::RouterClient};

use super::super::credential::RouterCalls;
use infera_proto::types::PickKind;
use prost::Message as _;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::{Code, Status};

use super::super::controls::Controls;
use crate::metrics::ProxyMetrics;

/// Picks one `PickMany` carries at most (control refuses more than 1,024).
const MAX_BATCH: usize = 256;
/// The encoded picks one `PickMany` carries at most (control, like every tonic server, refuses
/// messages over 4 MiB; a 2,000-page prefill pick is ~18 KiB).
const MAX_BATCH_BYTES: usize = 1 << 20;
/// How long picks go out one by one after a control answered `PickMany` UNIMPLEMENTED.
const OLD_CONTROL_RETRY: Duration = Duration::from_secs(60);

/// One pick waiting to go out, and where its answer goes.
#[derive(Debug)]
pub(super) struct Asked {
    pub(super) kind: PickKind,
    pub(super) pick: pb::PickRequest,
    /// The request's span: its trace context travels with the pick.
    pub(super) span: tracing::Span,
    /// The call's deadline, for control (`grpc-timeout`).
    pub(super) timeout: Duration,
    pub(super) answer: oneshot::Sender<Result<pb::PickResponse, Status>>,
}

/// The two ways to pick, so that sending can be checked against a control of either age.
pub(super) trait PickCalls: Clone + Send + 'static {
    fn pick_one(
        &mut self,
        kind: PickKind,
        req: tonic::Request<pb::PickRequest>,
    ) -> impl Future<Output = Result<pb::PickResponse, Status>> + Send;
    fn pick_many(
        &mut self,
        req: tonic::Request<pb::PickManyRequest>,
    ) -> impl Future<Output = Result<pb::PickManyResponse, Status>> + Send;
}

impl PickCalls for RouterCalls {
    async fn pick_one(
        &mut self,
        kind: PickKind,
        req: tonic::Request<pb::PickRequest>,
    ) -> Result<pb::PickResponse, Status> {
        let answer = match kind {
            PickKind::Prefill => self.pick_prefill(req).await,
            PickKind::Decode => self.pick_decode(req).await,
        };
        answer.map(tonic::Response::into_inner)
    }

    async fn pick_many(
        &mut self,
        req: tonic::Request<pb::PickManyRequest>,
    ) -> Result<pb::PickManyResponse, Status> {
        RouterClient::pick_many(self, req).await.map(tonic::Response::into_inner)
    }
}

/// Where batches go: the current control's client.
pub(super) trait Destination: Send + 'static {
    type Calls: PickCalls;
    fn calls(&self) -> Self::Calls;
    /// A batch of `picks` picks goes out.
    fn batched(&self, picks: usize);
}

/// The current control, and the metrics that count the batches.
struct ToControl {
    controls: Arc<Controls>,
    metrics: Arc<ProxyMetrics>,
}

impl Destination for ToControl {
    type Calls = RouterCalls;
    fn calls(&self) -> Self::Calls {
        self.controls.current().1
    }
    fn batched(&self, picks: usize) {
        self.metrics.pick_batch(picks);
    }
}

/// Until when picks go out one by one (a control answered `PickMany` UNIMPLEMENTED).
type UnaryUntil = Arc<Mutex<Option<Instant>>>;

/// Hands what `queue` receives to `to`, a batch at a time, until every sender is gone.
pub(super) async fn run<D: Destination>(mut queue: mpsc::UnboundedReceiver<Asked>, to: D) {
    let unary_until = UnaryUntil::default();
    while let Some(first) = queue.recv().await {
        // The task that asked for `first` woke this one, and tokio runs a task woken that way
        // next: without stepping back, every batch would be that one pick. Behind the tasks that
        // are ready now, it collects what they ask as well.
        tokio::task::yield_now().await;
        let mut bytes = first.pick.encoded_len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH
            && bytes < MAX_BATCH_BYTES
            && let Ok(asked) = queue.try_recv()
        {
            bytes += asked.pick.encoded_len();
            batch.push(asked);
        }
        to.batched(batch.len());
        tokio::spawn(send(batch, to.calls(), unary_until.clone()));
    }
}

/// Sends `batch` and hands every pick its answer.
pub(super) async fn send<C: PickCalls>(mut batch: Vec<Asked>, mut calls: C, unary_until: UnaryUntil) {
    // A pick nobody waits for any more would book what nobody releases.
    batch.retain(|asked| !asked.answer.is_closed());
    // A pick that waits for fleet admission holds its call until control admits or sheds it:
    // one unary call of its own, off this queue's path.
    let (waiting, batch): (Vec<_>, Vec<_>) = batch.into_iter().partition(|asked| asked.pick.wait_admission);
    if !waiting.is_empty() {
        tokio::spawn(one_by_one(waiting, calls.clone()));
    }
    let unary = unary_until.lock().expect("pick queue lock").is_some_and(|until| Instant::now() < until);
    if batch.len() <= 1 || unary {
        return one_by_one(batch, calls).await;
    }
    let picks = batch
        .iter()
        .map(|asked| pb::PickItem {
            kind: pb::PickKind::from(asked.kind) as i32,
            pick: Some(asked.pick.clone()),
            trace_context: infera_runtime::telemetry::inject_map(&asked.span),
        })
        .collect();
    let mut req = tonic::Request::new(pb::PickManyRequest { picks });
    req.set_timeout(batch.iter().map(|asked| asked.timeout).max().unwrap_or_default());
    match calls.pick_many(req).await {
        Ok(answer) => {
            let mut results = answer.results.into_iter();
            for asked in batch {
                let result = match results.next().and_then(|r| r.outcome) {
                    Some(Outcome::Picked(picked)) => Ok(picked),
                    Some(Outcome::Failed(failure)) => Err(infera_proto::error::status_of_failure(failure)),
                    None => Err(Status::internal("control answered a PickMany without this pick's result")),
                };
                let _ = asked.answer.send(result);
            }
        }
        Err(s) if s.code() == Code::Unimplemented && StatusReason::of(&s).known().is_none() => {
            tracing::info!("control does not know PickMany; picking one call at a time for a minute");
            *unary_until.lock().expect("pick queue lock") = Some(Instant::now() + OLD_CONTROL_RETRY);
            one_by_one(batch, calls).await;
        }
        Err(s) => {
            for asked in batch {
                let _ = asked.answer.send(Err(s.clone()));
            }
        }
    }
}

/// Every pick of `batch` as its own `PickPrefill` or `PickDecode`, all at once.
async fn one_by_one<C: PickCalls>(batch: Vec<Asked>, calls: C) {
    let calls = batch.into_iter().map(|asked| {
        let mut calls = calls.clone();
        async move {
            let mut req = tonic::Request::new(asked.pick);
            req.set_timeout(asked.timeout);
            infera_runtime::telemetry::inject_metadata(&asked.span, req.metadata_mut());
            let _ = asked.answer.send(calls.pick_one(asked.kind, req).await);
        }
    });
    futures_util::future::join_all(calls).await;
}

/// The queue of one proxy's picks; its task starts with the first pick.
#[derive(Debug)]
pub(in crate::control) struct PickQueue {
    controls: Arc<Controls>,
    metrics: Arc<ProxyMetrics>,
    queue: OnceLock<mpsc::UnboundedSender<Asked>>,
}

impl PickQueue {
    /// Picks through the current replica of `controls`, counting the batches in `metrics`.
    pub(in crate::control) fn new(controls: Arc<Controls>, metrics: Arc<ProxyMetrics>) -> Self {
        Self { controls, metrics, queue: OnceLock::new() }
    }

    /// Queues `asked`; its answer arrives on its `answer` channel.
    pub(super) fn ask(&self, asked: Asked) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let to = ToControl { controls: self.controls.clone(), metrics: self.metrics.clone() };
            tokio::spawn(run(rx, to));
            tx
        });
        // The queue's task lives as long as this sender (it is never closed before).
        let _ = queue.send(asked);
    }
}

#[cfg(test)]
mod tests;

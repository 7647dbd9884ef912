//! Releases on their way to control, coalesced: the releases queued while the tasks that were
//! ready ran go out in one `ReleaseMany`. Nothing waits for a timer: at low load a batch is one
//! release, sent after one pass of the runtime's ready tasks; under load the releases that ended
//! together travel together, one gRPC call (and one control wake-up) for all of them.
//!
//! A batch is retried while control is unreachable, for the releases whose lease is still this
//! proxy's (when a lease ends, control releases everything it held). A control older than
//! `ReleaseMany` answers UNIMPLEMENTED; its batch then goes out one `Release` at a time.

use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, router_client::RouterClient};
use infera_proto::types::{LeaseId, Release};
use tokio::sync::mpsc;
use tonic::{Code, Status};

use crate::control::credential::RouterCalls;

/// Releases one `ReleaseMany` carries at most (control refuses more than 4,096).
const MAX_BATCH: usize = 1024;

/// One release waiting to go out, with the lease its reservation was booked under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Queued {
    pub(super) lease: LeaseId,
    pub(super) release: Release,
}

impl Queued {
    fn message(&self) -> pb::ReleaseRequest {
        pb::ReleaseRequest::from(&self.release)
    }
}

/// The two ways to release, so that sending can be checked against a control of either age.
pub(super) trait ReleaseCalls: Send + 'static {
    fn release_many(
        &mut self,
        m: pb::ReleaseManyRequest,
    ) -> impl Future<Output = Result<pb::ReleaseManyResponse, Status>> + Send;
    fn release(&mut self, m: pb::ReleaseRequest) -> impl Future<Output = Result<(), Status>> + Send;
}

impl ReleaseCalls for RouterCalls {
    async fn release_many(&mut self, m: pb::ReleaseManyRequest) -> Result<pb::ReleaseManyResponse, Status> {
        RouterClient::release_many(self, m).await.map(tonic::Response::into_inner)
    }

    async fn release(&mut self, m: pb::ReleaseRequest) -> Result<(), Status> {
        RouterClient::release(self, m).await.map(|_| ())
    }
}

/// Where batches go and what decides whether one is still worth sending.
pub(super) trait Destination: Clone + Send + Sync + 'static {
    type Calls: ReleaseCalls;
    /// The current control's client.
    fn calls(&self) -> Self::Calls;
    /// Whether `lease` is still the proxy's (its reservations are still control's to release).
    fn holds(&self, lease: LeaseId) -> bool;
    /// A call to control failed and will be retried.
    fn failed(&self);
}

/// Hands what `queue` receives to `to`, a batch at a time, until every sender is gone.
pub(super) async fn run<D: Destination>(mut queue: mpsc::UnboundedReceiver<Queued>, to: D) {
    while let Some(first) = queue.recv().await {
        // The task that queued `first` woke this one, and tokio runs a task woken that way next:
        // without stepping back, every batch would be that one release. Behind the tasks that
        // are ready now, it collects what they end as well.
        tokio::task::yield_now().await;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH
            && let Ok(queued) = queue.try_recv()
        {
            batch.push(queued);
        }
        tokio::spawn(send(batch, to.clone()));
    }
}

/// Does a status say "nothing to release here"? (The reservation is not this control's, or the
/// release is malformed: sending it again would not change that.)
fn not_needed(s: &Status) -> bool {
    matches!(
        StatusReason::of(s).known(),
        Some(ErrorReason::UnknownReservation | ErrorReason::InvalidArgument)
    )
}

/// Sends `batch` until control took it, or no lease of its releases is held any more.
pub(super) async fn send<D: Destination>(mut batch: Vec<Queued>, to: D) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let msg = pb::ReleaseManyRequest { releases: batch.iter().map(Queued::message).collect() };
        match to.calls().release_many(msg).await {
            Ok(answer) => {
                let odd =
                    answer.outcomes.iter().filter(|&&o| o != pb::ReleaseOutcome::Released as i32).count();
                if odd > 0 {
                    tracing::debug!(odd, of = batch.len(), "releases not needed (already ended or unknown)");
                }
                return;
            }
            Err(s) if s.code() == Code::Unimplemented && StatusReason::of(&s).known().is_none() => {
                // A control older than ReleaseMany.
                for queued in batch {
                    send_one(queued, to.clone()).await;
                }
                return;
            }
            Err(s) if not_needed(&s) => {
                tracing::debug!(status = %s.message(), "release batch refused");
                return;
            }
            Err(s) => {
                // The lease ended (control released everything it held), or its control is gone:
                // the leg was re-declared under the next lease.
                batch.retain(|q| to.holds(q.lease));
                if batch.is_empty() {
                    return;
                }
                to.failed();
                tracing::debug!(code = ?s.code(), releases = batch.len(), "release batch failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// One release by `Release`, retried as a batch is.
async fn send_one<D: Destination>(queued: Queued, to: D) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match to.calls().release(queued.message()).await {
            Ok(()) => return,
            Err(s) if not_needed(&s) => {
                tracing::debug!(reservation = %queued.release.id, status = %s.message(), "release not needed");
                return;
            }
            Err(s) => {
                if !to.holds(queued.lease) {
                    return;
                }
                to.failed();
                tracing::debug!(reservation = %queued.release.id, code = ?s.code(), "release failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

#[cfg(test)]
mod tests;

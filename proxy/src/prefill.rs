//! The prefill leg of a PD request: its own task sends it, drains the answer (SGLang completes
//! it after the KV transfer) and releases its reservation once — `EOF`, `FAILED` (reported to
//! the request, which fails the answer), or the reason it was cancelled with (the worker is then
//! asked to abort).

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use infera_proto::types::{LegFailure, ReleaseReason, RequestId, Target};
use tokio::sync::oneshot;

use crate::control::Pick;
use crate::error::{Leg, ProxyError, upstream_error_text};
use crate::prompt_logprobs::{self, MAX_PREFILL_BYTES, PrefillLogprobs};
use crate::upstream::{Upstreams, abort};

/// A prefill leg in flight; its task releases its own reservation.
#[derive(Debug)]
pub struct PrefillLeg {
    /// Fires when the prefill leg fails (`None` once it finished without failing).
    pub failed: Option<oneshot::Receiver<ProxyError>>,
    /// Ends the leg from outside its task.
    pub cancel: PrefillCancel,
    /// Where it went.
    pub target: Target,
    /// The prompt logprobs of its answer, when kept ([`crate::prompt_logprobs`]).
    pub logprobs: Option<oneshot::Receiver<PrefillLogprobs>>,
}

impl PrefillLeg {
    /// Sends `req` to the prefill `pick` chose, in a task of its own; `rid` names the request
    /// when the worker is asked to abort it. With `keep_logprobs` the prompt logprobs of its
    /// answer are kept for the decode's ([`PrefillLeg::logprobs`]).
    pub fn spawn(
        up: Upstreams,
        pick: Pick,
        req: Request<Full<Bytes>>,
        rid: RequestId,
        keep_logprobs: bool,
    ) -> Self {
        let (failed_tx, failed) = oneshot::channel();
        let (cancel, cancel_rx) = oneshot::channel();
        let (logprobs_tx, logprobs) = if keep_logprobs {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let target = pick.endpoint.target();
        let ends = LegEnds { failed: failed_tx, cancel: cancel_rx, logprobs: logprobs_tx };
        tokio::spawn(run(up, pick, req, rid, ends));
        Self { failed: Some(failed), cancel: PrefillCancel(Some(cancel)), target, logprobs }
    }

    /// The leg's failure if it has failed by now (without waiting); a leg found finished is no
    /// longer watched.
    pub fn failed_by_now(&mut self) -> Option<ProxyError> {
        match self.failed.as_mut()?.try_recv() {
            Ok(e) => Some(e),
            Err(oneshot::error::TryRecvError::Closed) => {
                self.failed = None;
                None
            }
            Err(oneshot::error::TryRecvError::Empty) => None,
        }
    }

    /// The leg's failure once it failed: `Ready(Some(e))`; `Ready(None)` once it finished
    /// without failing, or when it is no longer watched. Either way it is watched no more.
    pub fn poll_failed(&mut self, cx: &mut Context<'_>) -> Poll<Option<ProxyError>> {
        let Some(rx) = self.failed.as_mut() else { return Poll::Ready(None) };
        let failed = ready!(Pin::new(rx).poll(cx)).ok();
        self.failed = None;
        Poll::Ready(failed)
    }
}

/// The handle that ends a prefill leg from outside its task: [`PrefillCancel::cancel`] with a
/// reason (the leg releases with it and the worker is asked to abort), or
/// [`PrefillCancel::detach`] to let the leg finish on its own (the request ended normally).
///
/// Dropped without either, it cancels the leg as `CANCELLED`: the request was abandoned before
/// its decode answered (the request timed out, the client went away), and a prefill waiting for
/// a decode that will never pull its KV must not hold its reservation until its own timeout.
#[derive(Debug)]
pub struct PrefillCancel(Option<oneshot::Sender<ReleaseReason>>);

impl PrefillCancel {
    /// Cancels the leg with `reason`.
    pub fn cancel(mut self, reason: ReleaseReason) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(reason);
        }
    }

    /// Lets the leg finish on its own.
    pub fn detach(mut self) {
        // A closed channel tells the leg's task to stop listening for a cancel.
        self.0 = None;
    }
}

impl Drop for PrefillCancel {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(ReleaseReason::Cancelled);
        }
    }
}

/// How a leg's task talks to its request.
struct LegEnds {
    /// Its failure, reported.
    failed: oneshot::Sender<ProxyError>,
    /// A cancel, with its reason (closed: the request ended normally).
    cancel: oneshot::Receiver<ReleaseReason>,
    /// Where the prompt logprobs of its answer go, when kept.
    logprobs: Option<oneshot::Sender<PrefillLogprobs>>,
}

/// The leg's task: sends, drains, releases; a cancel ends it at once (release + abort), a
/// failure is reported on `failed`.
async fn run(up: Upstreams, pick: Pick, req: Request<Full<Bytes>>, rid: RequestId, ends: LegEnds) {
    let LegEnds { failed, cancel, logprobs } = ends;
    let url = pick.endpoint.url.clone();
    let run = async {
        let resp = up.client.request(req).await.map_err(|e| ProxyError::upstream(Leg::Prefill, &url, &e))?;
        let status = resp.status();
        if !status.is_success() {
            let body = upstream_error_text(resp.into_body()).await;
            return Err(ProxyError::UpstreamStatus { leg: Leg::Prefill, url: url.clone(), status, body });
        }
        // The prefill answers once the decode pulled the KV; its body is drained, not relayed,
        // and read only for the prompt logprobs the decode's answer lacks.
        let cut = |reason: String| ProxyError::Upstream {
            leg: Leg::Prefill,
            url: url.clone(),
            reason,
            failure: LegFailure::StreamCut,
        };
        let Some(tx) = logprobs else {
            return resp.into_body().collect().await.map(|_| ()).map_err(|e| cut(e.to_string()));
        };
        let body = Limited::new(resp.into_body(), MAX_PREFILL_BYTES).collect().await;
        match body {
            Ok(body) => {
                let _ = tx.send(prompt_logprobs::from_prefill(&body.to_bytes()));
                Ok(())
            }
            Err(e) if e.is::<LengthLimitError>() => {
                tracing::warn!(%url, max_bytes = MAX_PREFILL_BYTES, "a prefill answer too large to read its prompt logprobs");
                Ok(())
            }
            Err(e) => Err(cut(e.to_string())),
        }
    };
    match drive(run, cancel, DETACHED_GRACE).await {
        Ending::Finished(Ok(())) => pick.release(ReleaseReason::Eof),
        Ending::Finished(Err(e)) => {
            tracing::warn!(error = %e, "prefill leg failed");
            up.metrics.upstream_error(Leg::Prefill);
            match e.leg_failure().and_then(|(_, f)| f) {
                Some(f) => pick.fail(f),
                None => pick.release(ReleaseReason::Failed),
            }
            let _ = failed.send(e);
        }
        Ending::Cancelled(reason) => {
            pick.release(reason);
            abort(&up.client, &url, &rid);
        }
        Ending::Overdue => {
            tracing::warn!(%url, rid = ?rid, grace_s = DETACHED_GRACE.as_secs(), "prefill leg still open after its request ended; aborted");
            pick.release(ReleaseReason::Cancelled);
            abort(&up.client, &url, &rid);
        }
    }
}

/// How long a prefill may take to answer once its request has ended normally. The decode has
/// streamed its answer, so the KV was pulled long ago: a prefill still open this much later is
/// stuck, and must not hold its reservation (a hung engine is not a crash; its lease lives on).
pub const DETACHED_GRACE: Duration = Duration::from_secs(60);

/// How a prefill leg ended.
#[derive(Debug)]
enum Ending {
    /// The prefill answered (or failed) by itself.
    Finished(Result<(), ProxyError>),
    /// The request cancelled it with this reason.
    Cancelled(ReleaseReason),
    /// The request ended normally and the prefill was still open `grace` later.
    Overdue,
}

/// Runs the leg until it finishes, is cancelled, or outlives its request by `grace` (a closed
/// `cancel` channel means the request ended normally).
async fn drive(
    run: impl Future<Output = Result<(), ProxyError>>,
    cancel: oneshot::Receiver<ReleaseReason>,
    grace: Duration,
) -> Ending {
    let mut run = std::pin::pin!(run);
    let mut cancel = Some(cancel);
    let mut overdue = std::pin::pin!(tokio::time::sleep(Duration::MAX));
    loop {
        tokio::select! {
            r = &mut run => return Ending::Finished(r),
            reason = async { cancel.as_mut().expect("guarded by the branch condition").await }, if cancel.is_some() => {
                match reason {
                    Ok(reason) => return Ending::Cancelled(reason),
                    // The request ended normally: the prefill may finish on its own, within grace.
                    Err(_) => {
                        cancel = None;
                        overdue.as_mut().reset(tokio::time::Instant::now() + grace);
                    }
                }
            }
            () = &mut overdue => return Ending::Overdue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_prefill_handle_cancels_and_a_detached_one_does_not() {
        let (tx, rx) = oneshot::channel();
        drop(PrefillCancel(Some(tx)));
        assert_eq!(rx.await, Ok(ReleaseReason::Cancelled), "abandoned: cancelled");
        let (tx, rx) = oneshot::channel();
        PrefillCancel(Some(tx)).cancel(ReleaseReason::Failed);
        assert_eq!(rx.await, Ok(ReleaseReason::Failed));
        let (tx, rx) = oneshot::channel::<ReleaseReason>();
        PrefillCancel(Some(tx)).detach();
        assert!(rx.await.is_err(), "detached: the leg finishes on its own");
    }

    fn leg_ok() -> Result<(), ProxyError> {
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_detached_leg_may_finish_within_its_grace_and_is_ended_after_it() {
        let grace = Duration::from_secs(60);
        // Finishes 59 s after its request ended: its own ending.
        let (tx, rx) = oneshot::channel();
        PrefillCancel(Some(tx)).detach();
        let late = async {
            tokio::time::sleep(Duration::from_secs(59)).await;
            leg_ok()
        };
        assert!(matches!(drive(late, rx, grace).await, Ending::Finished(Ok(()))));
        // Never answers: overdue exactly at the grace, not before.
        let (tx, rx) = oneshot::channel();
        PrefillCancel(Some(tx)).detach();
        let start = tokio::time::Instant::now();
        let stuck = std::future::pending::<Result<(), ProxyError>>();
        assert!(matches!(drive(stuck, rx, grace).await, Ending::Overdue));
        assert_eq!(start.elapsed(), grace);
        // Still attached, a leg is never overdue: it ends with its request's cancel.
        let (tx, rx) = oneshot::channel();
        let attached = tokio::spawn(drive(std::future::pending::<Result<(), ProxyError>>(), rx, grace));
        tokio::time::sleep(grace * 10).await;
        PrefillCancel(Some(tx)).cancel(ReleaseReason::Failed);
        assert!(matches!(attached.await.unwrap(), Ending::Cancelled(ReleaseReason::Failed)));
    }
}

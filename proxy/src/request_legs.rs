//! One request's legs from dispatch to release. [`RequestLegs`] owns the decode pick and, in PD,
//! the prefill leg running in its own task (which releases the prefill's reservation), from the
//! moment [`dispatch`](crate::forward::dispatch) sends them until the request ends; the retry
//! loop, the relay and its end guard pass it along whole. Each leg is released exactly once:
//!
//! - [`RequestLegs::end`] with a reason, or [`RequestLegs::fail`] with the error that ended the
//!   request: the decode is released with it (a decode that failed on its worker: with how, for
//!   outlier ejection). Unless the answer reached its end (`EOF`, when the prefill finishes on its
//!   own), the prefill leg is cancelled with the same reason and the decode's worker is asked to
//!   abort.
//! - Dropped before that (an attempt abandoned before its answer began: the request's deadline,
//!   the client gone): the decode pick releases itself as `CANCELLED` and the prefill handle
//!   cancels its leg so; the decode's worker is not asked to abort.

use std::task::{Context, Poll};

use infera_proto::types::{LegFailure, ReleaseReason, RequestId, Target};
use tokio::sync::oneshot;

use crate::control::Pick;
use crate::error::{Leg, ProxyError};
use crate::prefill::PrefillLeg;
use crate::prompt_logprobs::PrefillLogprobs;
use crate::targets::Endpoint;
use crate::upstream::{WorkerClient, abort};

/// The legs of one sent attempt of a request, released exactly once.
#[derive(Debug)]
pub struct RequestLegs {
    /// Asks the decode's worker to abort.
    client: WorkerClient,
    /// The decode leg (`None` once released).
    decode: Option<Pick>,
    /// The prefill leg (PD; `None` once ended or let finish on its own).
    prefill: Option<PrefillLeg>,
    /// The id the engines know the attempt by (what an abort names).
    rid: RequestId,
}

impl RequestLegs {
    /// The legs of an attempt sent as `rid`: the `decode` pick and the `prefill` leg already
    /// running, if any.
    pub fn new(client: WorkerClient, decode: Pick, prefill: Option<PrefillLeg>, rid: RequestId) -> Self {
        Self { client, decode: Some(decode), prefill, rid }
    }

    /// Where the decode leg went (`None` once the legs ended).
    pub fn decode(&self) -> Option<&Endpoint> {
        self.decode.as_ref().map(|d| &d.endpoint)
    }

    /// Where the prefill leg went (`None`: no prefill leg, or it ended).
    pub fn prefill_target(&self) -> Option<Target> {
        self.prefill.as_ref().map(|p| p.target.clone())
    }

    /// The prefill leg, while it is the request's to watch.
    pub fn prefill_mut(&mut self) -> Option<&mut PrefillLeg> {
        self.prefill.as_mut()
    }

    /// The prompt logprobs the prefill's answer will carry, when kept (taken once).
    pub fn take_prompt_logprobs(&mut self) -> Option<oneshot::Receiver<PrefillLogprobs>> {
        self.prefill.as_mut().and_then(|p| p.logprobs.take())
    }

    /// The prefill leg's failure once it failed; `Ready(None)` when there is none to wait for
    /// (no prefill leg, or it finished without failing).
    pub fn poll_prefill_failed(&mut self, cx: &mut Context<'_>) -> Poll<Option<ProxyError>> {
        self.prefill.as_mut().map_or(Poll::Ready(None), |p| p.poll_failed(cx))
    }

    /// Whether a prefill leg is still watched for a failure.
    pub fn prefill_may_fail(&self) -> bool {
        self.prefill.as_ref().is_some_and(|p| p.failed.is_some())
    }

    /// Ends the request with `reason`; `true` when this call ended it (later calls do nothing).
    pub fn end(&mut self, reason: ReleaseReason) -> bool {
        self.end_with(reason, None)
    }

    /// Ends the request as failed with `e`: counted against the decode's target only when its
    /// own leg failed (a prefill leg that failed released itself so). `true` when this call
    /// ended it.
    pub fn fail(&mut self, e: &ProxyError) -> bool {
        let failure = e.leg_failure().filter(|(leg, _)| *leg == Leg::Decode).and_then(|(_, f)| f);
        self.end_with(ReleaseReason::Failed, failure)
    }

    fn end_with(&mut self, reason: ReleaseReason, failure: Option<LegFailure>) -> bool {
        let Some(decode) = self.decode.take() else { return false };
        let prefill = self.prefill.take();
        // On EOF the prefill leg finishes on its own.
        let finishing = match prefill {
            Some(p) if reason != ReleaseReason::Eof => {
                p.cancel.cancel(reason);
                None
            }
            p => p,
        };
        if reason != ReleaseReason::Eof {
            abort(&self.client, &decode.endpoint.url, &self.rid);
        }
        match failure {
            Some(f) => decode.fail(f),
            None => decode.release(reason),
        }
        if let Some(p) = finishing {
            p.cancel.detach();
        }
        true
    }
}

//! One pick: the RPC with its deadline (`--pick-timeout-ms`), control's refusals decoded into
//! [`PickError`]s, the lease reopened when control forgot it, and the local fallback otherwise.
//! The RPC itself may outlive the deadline: if control books after the proxy gave up, the late
//! answer is released at once, never leaked. Picks travel through the [`queue`], which sends
//! those asked together in one `PickMany`.

mod queue;

use std::sync::Arc;
use std::time::Duration;

use infera_proto::convert;
use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb;
use infera_proto::types::{LeaseId, ModelName, PickKind, PickRequest, ReleaseReason, Target};
use tonic::Status;

use super::ControlLink;
use super::legs::{Booking, LegFacts};
use super::page_hashes::PageHashes;
use super::pick::{Pick, PickError};
use crate::facts::Facts;
use crate::targets::Endpoint;
pub(super) use queue::PickQueue;

/// How long a pick the proxy stopped waiting for is still awaited (to release what it booked).
const LATE_PICK_LIMIT: Duration = Duration::from_secs(10);

/// A pick's answer to come, boxed so that it can move into a background task when the proxy
/// stops waiting.
type PickCall = std::pin::Pin<Box<dyn Future<Output = Result<pb::PickResponse, Status>> + Send>>;

/// A pick RPC in flight; if the proxy stops waiting for it (deadline, or the request is
/// dropped), what control books is released as soon as the answer arrives.
struct PendingPick<'a> {
    call: Option<PickCall>,
    link: Arc<ControlLink>,
    lease: LeaseId,
    kind: PickKind,
    facts: &'a Facts,
    model: &'a ModelName,
}

impl Drop for PendingPick<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.link.release_late(call, self.lease, self.kind, self.facts.clone(), self.model.clone());
        }
    }
}

impl ControlLink {
    /// Picks a target for one leg: control when it answers in time, the local fallback
    /// otherwise; neither takes a target of `exclude` (the request failed there) unless no other
    /// is left.
    pub async fn pick(
        self: &Arc<Self>,
        kind: PickKind,
        facts: &Facts,
        model: &ModelName,
        exclude: &[Target],
    ) -> Result<Pick, PickError> {
        self.pick_until(kind, facts, model, exclude, None).await
    }

    /// [`ControlLink::pick`] for a decode pick fleet admission queued: it waits in control's
    /// queue (one unary call) until admitted, shed, or `until` (the request's queue deadline)
    /// passes, which sheds it too. Never routed locally while control answers: that would
    /// admit what control turned away.
    pub async fn pick_waiting(
        self: &Arc<Self>,
        facts: &Facts,
        model: &ModelName,
        exclude: &[Target],
        until: std::time::Instant,
    ) -> Result<Pick, PickError> {
        self.pick_until(PickKind::Decode, facts, model, exclude, Some(until)).await
    }

    async fn pick_until(
        self: &Arc<Self>,
        kind: PickKind,
        facts: &Facts,
        model: &ModelName,
        exclude: &[Target],
        until: Option<std::time::Instant>,
    ) -> Result<Pick, PickError> {
        let wait = until.map(|u| u.saturating_duration_since(std::time::Instant::now()));
        if let Some(lease) = self.lease() {
            let page = PageHashes::of(kind, until.is_some(), facts, model, &self.targets());
            let pick = PickRequest {
                lease,
                request_id: facts.request_id.clone(),
                model: model.clone(),
                input_tokens: facts.input_tokens,
                session: facts.session.clone(),
                page_hashes: page.hashes,
                page_size: page.page_size,
                exclude: exclude.to_vec(),
                admission: infera_proto::types::Admission { wait: wait.is_some(), ..facts.admission.clone() },
            };
            let (answer, answered) = tokio::sync::oneshot::channel();
            self.picks.ask(queue::Asked {
                kind,
                pick: pb::PickRequest::from(&pick),
                span: tracing::Span::current(),
                timeout: wait.map_or(LATE_PICK_LIMIT, |w| w.max(LATE_PICK_LIMIT)),
                answer,
            });
            // The queue answers every pick it takes; it is gone only when the runtime is.
            let call: PickCall = Box::pin(async move {
                answered.await.unwrap_or_else(|_| Err(Status::unavailable("the pick queue stopped")))
            });
            let mut pending = PendingPick { call: Some(call), link: self.clone(), lease, kind, facts, model };
            let sent = std::time::Instant::now();
            let answer = tokio::select! {
                answer = pending.call.as_mut().expect("set above") => {
                    pending.call = None;
                    // Control answered (a transport failure is not an answer).
                    if answer.as_ref().map_or_else(|s| StatusReason::of(s).known().is_some(), |_| true) {
                        self.metrics.picked(kind, sent.elapsed().as_secs_f64());
                    }
                    Ok(answer)
                }
                // `pending` is dropped below with its call: a late answer is released.
                () = tokio::time::sleep(wait.unwrap_or(self.pick_timeout)) => Err(()),
            };
            drop(pending);
            match answer {
                Ok(Ok(resp)) => match self.booked(&resp, lease, kind, facts, model) {
                    Some(pick) => return Ok(pick),
                    None => tracing::warn!("control answered a pick without a target; routing locally"),
                },
                Ok(Err(status)) => match StatusReason::of(&status).known() {
                    Some(ErrorReason::UnknownModel) => return Err(PickError::UnknownModel),
                    Some(ErrorReason::NoPool) => return Err(PickError::NoPool),
                    Some(ErrorReason::NoEligibleTarget) => return Err(PickError::NoTarget),
                    Some(ErrorReason::AtCapacity) => return Err(PickError::AtCapacity),
                    Some(ErrorReason::AdmissionQueued) => return Err(PickError::Queued),
                    Some(ErrorReason::AdmissionShed) => return Err(PickError::Shed),
                    Some(ErrorReason::UnknownServiceClass) => {
                        return Err(PickError::UnknownClass(status.message().to_owned()));
                    }
                    Some(ErrorReason::NoCompatiblePair) => {
                        return Err(PickError::NoCompatiblePair(status.message().to_owned()));
                    }
                    Some(ErrorReason::InvalidArgument) => {
                        return Err(PickError::Invalid(status.message().to_owned()));
                    }
                    Some(ErrorReason::UnknownLease) => {
                        tracing::warn!(%lease, "control does not know this proxy's lease; reopening it");
                        self.lease.forget(lease);
                    }
                    Some(ErrorReason::NotLeader) => {
                        tracing::warn!(%lease, leader = ?StatusReason::leader(&status), "control does not lead; moving the lease to the leader");
                        if let Some(leader) = StatusReason::leader(&status) {
                            let _ = self.controls.follow(&leader);
                        }
                        self.lease.forget(lease);
                        // A pick waiting for admission waits on at the new leader, its arrival
                        // (and so its TTFT deadline) unchanged: the queue survives the change.
                        if let Some(until) = until
                            && self.new_lease(lease, until).await
                        {
                            return Box::pin(self.pick_until(kind, facts, model, exclude, Some(until))).await;
                        }
                    }
                    Some(_) => tracing::debug!(code = ?status.code(), "pick refused; routing locally"),
                    None => {
                        // No reason of control's: a transport failure. The lease loop checks
                        // the replica at once.
                        tracing::debug!(code = ?status.code(), "pick failed; routing locally");
                        self.lease.suspect();
                    }
                },
                Err(()) if wait.is_some() => return Err(PickError::Shed),
                Err(()) => {
                    tracing::debug!(timeout = ?self.pick_timeout, "pick timed out; routing locally");
                    self.lease.suspect();
                }
            }
        }
        self.metrics.fallback(kind);
        let endpoint = self.fallback.choose(&self.targets(), &self.releaser.load, kind, model, exclude)?;
        let facts = LegFacts {
            kind,
            target: endpoint.target(),
            model: model.clone(),
            request_id: facts.request_id.clone(),
            input_tokens: facts.input_tokens,
        };
        Ok(Pick::new(&self.releaser, endpoint, facts, None))
    }

    /// Waits (until `until`) for the lease loop to open a lease other than `old` and re-declare
    /// this proxy's legs under it (so that the next control's ledger holds them before the
    /// waiting pick is weighed against it); whether it did.
    async fn new_lease(&self, old: LeaseId, until: std::time::Instant) -> bool {
        while std::time::Instant::now() < until {
            if self.lease.declared().is_some_and(|l| l != old) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The leg control booked with `answer` under `lease`; `None` when the answer does not convert
    /// (no target, a malformed id).
    fn booked(
        &self,
        answer: &pb::PickResponse,
        lease: LeaseId,
        kind: PickKind,
        facts: &Facts,
        model: &ModelName,
    ) -> Option<Pick> {
        let picked = convert::picked(answer)
            .map_err(|e| tracing::debug!(error = %e, "a pick answer that does not convert"))
            .ok()?;
        let endpoint = Endpoint::new(&picked.worker, picked.target.rank);
        // What control booked: a prefill charges the tokens the target does not hold already.
        let cached = answer.cost.as_ref().map_or(0, |c| c.cached_tokens);
        let leg = LegFacts {
            kind,
            target: picked.target,
            model: model.clone(),
            request_id: facts.request_id.clone(),
            input_tokens: facts.input_tokens.saturating_sub(cached),
        };
        let booking = Booking { reservation: picked.reservation, lease };
        Some(Pick::new(&self.releaser, endpoint, leg, Some(booking)))
    }

    /// A pick the proxy stopped waiting for may still be booked by control: wait for it in the
    /// background and release what it booked at once.
    fn release_late(
        self: &Arc<Self>,
        call: PickCall,
        lease: LeaseId,
        kind: PickKind,
        facts: Facts,
        model: ModelName,
    ) {
        let link = self.clone();
        tokio::spawn(async move {
            if let Ok(resp) = call.await
                && let Some(pick) = link.booked(&resp, lease, kind, &facts, &model)
            {
                link.metrics.late_pick();
                pick.release(ReleaseReason::Cancelled);
            }
        });
    }
}

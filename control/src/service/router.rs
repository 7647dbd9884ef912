//! `infera.control.v1.Router`: what proxies call on every request. Every call carries its caller's
//! identity ([`crate::auth::caller`], put there by the Router's interceptor) and acts only on that
//! identity's leases and reservations.

use std::sync::Arc;
use std::time::Duration;

use infera_proto::convert::{self, ConvertError};
use infera_proto::pb::{self, router_server::Router};
use infera_proto::types::{PickKind, PickRequest};
use prost::Message as _;
use tonic::{Request, Response, Status};

use super::wire;
use super::{item_span, rpc_span};
use crate::auth::caller;
use crate::error::ControlError;
use crate::identity::Identity;
use crate::routing::{Declared, ReleaseEffect};
use crate::state::ControlState;

/// The Router service.
#[derive(Debug)]
pub(crate) struct RouterService {
    state: Arc<ControlState>,
    /// The largest `Redeclare` taken, encoded.
    redeclare_bytes: usize,
}

impl RouterService {
    pub(super) fn new(state: Arc<ControlState>, redeclare_bytes: usize) -> Self {
        Self { state, redeclare_bytes }
    }

    async fn pick(
        &self,
        kind: PickKind,
        req: Request<pb::PickRequest>,
    ) -> Result<Response<pb::PickResponse>, Status> {
        use tracing::Instrument as _;
        let who = caller(&req)?;
        let span = rpc_span(rpc_name(kind), &req);
        let pick = span.in_scope(|| self.converted(kind, convert::pick_request(req.into_inner())))?;
        // A decode pick that asks to wait for fleet admission holds the call until it is admitted
        // or shed; a client that goes away gives up its place with this future.
        let picked = if pick.admission.wait {
            self.state.pick_waiting(kind, &pick, &who).instrument(span.clone()).await?
        } else {
            span.in_scope(|| self.state.pick(kind, &pick, &who))?
        };
        Ok(Response::new(answer(&picked, &pick)))
    }

    /// A pick's request as the wire boundary checked it (a bad one is counted).
    fn converted(
        &self,
        kind: PickKind,
        pick: Result<PickRequest, ConvertError>,
    ) -> Result<PickRequest, ControlError> {
        let pick = pick.map_err(|e| {
            let e = ControlError::from(e);
            self.state.pick_rejected(kind, &e);
            e
        })?;
        tracing::Span::current().record("request_id", pick.request_id.as_str());
        Ok(pick)
    }

    /// One pick of a `PickMany` (inside its span), from its converted request, for `who`: it
    /// never waits for admission.
    fn book(
        &self,
        kind: PickKind,
        pick: Result<PickRequest, ConvertError>,
        who: &Identity,
    ) -> Result<pb::PickResponse, ControlError> {
        let pick = self.converted(kind, pick)?;
        let picked = self.state.pick(kind, &pick, who)?;
        Ok(answer(&picked, &pick))
    }

    /// One pick of a `PickMany`: in a span of its own under the trace it carries, as the unary
    /// call would be.
    fn pick_item(&self, item: pb::PickItem, who: &Identity) -> pb::PickResult {
        use pb::pick_result::Outcome;
        let answer =
            convert::pick_kind("picks.kind", item.kind).map_err(ControlError::from).and_then(|kind| {
                let span = item_span(rpc_name(kind), &item.trace_context);
                span.in_scope(|| self.book(kind, convert::item_pick(item.pick), who))
            });
        let outcome = match answer {
            Ok(picked) => Outcome::Picked(picked),
            Err(e) => Outcome::Failed(infera_proto::error::failure_of_status(&Status::from(e))),
        };
        pb::PickResult { outcome: Some(outcome) }
    }
}

/// What a pick answers once booked.
fn answer(picked: &crate::routing::Picked, pick: &PickRequest) -> pb::PickResponse {
    pb::PickResponse {
        reservation_id: picked.reservation.to_string(),
        target: Some((&picked.chosen.target).into()),
        worker: Some(picked.worker.as_ref().into()),
        cost: Some(wire::terms(&picked.chosen, pick.input_tokens, picked.weight)),
        mode: pb::DecodeInputDemand::from(picked.mode) as i32,
    }
}

fn rpc_name(kind: PickKind) -> &'static str {
    if kind == PickKind::Decode { "PickDecode" } else { "PickPrefill" }
}

#[tonic::async_trait]
impl Router for RouterService {
    async fn open_lease(&self, req: Request<pb::OpenLeaseRequest>) -> Result<Response<pb::Lease>, Status> {
        let who = caller(&req)?;
        let m = req.into_inner();
        let holder = convert::lease_holder("holder", m.holder).map_err(ControlError::from)?;
        let crate::routing::OpenedLease { lease, ttl } =
            self.state.open_lease(holder.clone(), Duration::from_millis(m.ttl_ms.into()), &who)?;
        tracing::info!(%lease, holder = ?holder.as_str(), identity = ?who.as_str(), ttl_ms = ttl.as_millis() as u64, "lease opened");
        Ok(Response::new(pb::Lease { lease_id: lease.to_string(), ttl_ms: wire::millis(ttl) }))
    }

    async fn keep_alive(&self, req: Request<pb::KeepAliveRequest>) -> Result<Response<pb::Lease>, Status> {
        let who = caller(&req)?;
        let m = req.into_inner();
        let lease = convert::lease_id("lease_id", &m.lease_id).map_err(ControlError::from)?;
        let ttl = self.state.keep_alive(lease, &who)?;
        Ok(Response::new(pb::Lease { lease_id: m.lease_id, ttl_ms: wire::millis(ttl) }))
    }

    async fn close_lease(
        &self,
        req: Request<pb::CloseLeaseRequest>,
    ) -> Result<Response<pb::CloseLeaseResponse>, Status> {
        let who = caller(&req)?;
        let lease = convert::lease_id("lease_id", &req.get_ref().lease_id).map_err(ControlError::from)?;
        let released = self.state.close_lease(lease, &who)?;
        tracing::info!(%lease, released, identity = ?who.as_str(), "lease closed");
        Ok(Response::new(pb::CloseLeaseResponse { released_reservations: released as u32 }))
    }

    async fn pick_prefill(
        &self,
        req: Request<pb::PickRequest>,
    ) -> Result<Response<pb::PickResponse>, Status> {
        self.pick(PickKind::Prefill, req).await
    }

    async fn pick_decode(&self, req: Request<pb::PickRequest>) -> Result<Response<pb::PickResponse>, Status> {
        self.pick(PickKind::Decode, req).await
    }

    async fn pick_many(
        &self,
        req: Request<pb::PickManyRequest>,
    ) -> Result<Response<pb::PickManyResponse>, Status> {
        let who = caller(&req)?;
        let span = rpc_span("PickMany", &req);
        let picks =
            span.in_scope(|| convert::pick_many_request(req.into_inner())).map_err(ControlError::from)?;
        let results = picks.into_iter().map(|item| self.pick_item(item, &who)).collect();
        Ok(Response::new(pb::PickManyResponse { results }))
    }

    async fn release(
        &self,
        req: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let who = caller(&req)?;
        let span = rpc_span("Release", &req);
        let _entered = span.enter();
        let release = convert::release_request(req.get_ref()).map_err(ControlError::from)?;
        let already_released = match self.state.release(release, &who)? {
            ReleaseEffect::Ended => false,
            ReleaseEffect::AlreadyEnded => true,
        };
        Ok(Response::new(pb::ReleaseResponse { already_released }))
    }

    async fn release_many(
        &self,
        req: Request<pb::ReleaseManyRequest>,
    ) -> Result<Response<pb::ReleaseManyResponse>, Status> {
        let who = caller(&req)?;
        let span = rpc_span("ReleaseMany", &req);
        let _entered = span.enter();
        let releases = convert::release_many_request(req.get_ref()).map_err(ControlError::from)?;
        let mut outcomes = Vec::with_capacity(releases.len());
        for release in releases {
            let outcome = match release {
                Err(e) => {
                    tracing::debug!(error = %e, "a release of ReleaseMany does not convert");
                    pb::ReleaseOutcome::Invalid
                }
                // A failure of the call itself (not the leader, not ready) fails it whole: the
                // proxy sends it again, and what was released already comes back ALREADY_RELEASED.
                Ok(release) => match self.state.release(release, &who) {
                    Ok(ReleaseEffect::Ended) => pb::ReleaseOutcome::Released,
                    Ok(ReleaseEffect::AlreadyEnded) => pb::ReleaseOutcome::AlreadyReleased,
                    Err(ControlError::UnknownReservation(_) | ControlError::ForeignReservation(_)) => {
                        pb::ReleaseOutcome::UnknownReservation
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            outcomes.push(outcome as i32);
        }
        Ok(Response::new(pb::ReleaseManyResponse { outcomes }))
    }

    async fn list_targets(
        &self,
        req: Request<pb::ListTargetsRequest>,
    ) -> Result<Response<pb::ListTargetsResponse>, Status> {
        // Every replica answers once it has read the registry: it is the proxies' fallback
        // list, whoever leads.
        self.state.check_registry_read()?;
        Ok(Response::new(super::list_targets(&self.state, req.into_inner())?))
    }

    async fn redeclare(
        &self,
        req: Request<pb::RedeclareRequest>,
    ) -> Result<Response<pb::RedeclareResponse>, Status> {
        let who = caller(&req)?;
        let span = rpc_span("Redeclare", &req);
        let _entered = span.enter();
        let bytes = req.get_ref().encoded_len();
        if bytes > self.redeclare_bytes {
            self.state.bound_refusal("redeclare_bytes");
            let e = ControlError::RedeclareTooLarge { bytes, max: self.redeclare_bytes };
            tracing::warn!(identity = ?who.as_str(), error = %e, "a Redeclare refused");
            return Err(e.into());
        }
        let (lease, legs) = convert::redeclare_request(req.into_inner()).map_err(ControlError::from)?;
        let results = self.state.redeclare(lease, &legs, &who)?;
        let booked = results.iter().filter(|r| matches!(r, Declared::Booked { .. })).count();
        tracing::info!(%lease, identity = ?who.as_str(), legs = legs.len(), booked, "legs re-declared");
        Ok(Response::new(pb::RedeclareResponse {
            results: results
                .iter()
                .map(|r| match r {
                    Declared::Booked { reservation, .. } => pb::DeclaredResult {
                        reservation_id: reservation.to_string(),
                        ..pb::DeclaredResult::default()
                    },
                    Declared::UnknownTarget => {
                        pb::DeclaredResult { unknown_target: true, ..pb::DeclaredResult::default() }
                    }
                    Declared::OverCapacity => {
                        pb::DeclaredResult { over_capacity: true, ..pb::DeclaredResult::default() }
                    }
                })
                .collect(),
        }))
    }
}

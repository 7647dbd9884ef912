//! `infera.control.v1.Admin`: inspect the ledger, change W and the mode, drain, watch.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use infera_proto::convert;
use infera_proto::pb::{self, admin_server::Admin};
use infera_proto::types::WorkerId;
use tokio::sync::watch;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tonic::{Request, Response, Status};

use super::forward::Forwarder;
use super::wire;
use crate::error::ControlError;
use crate::fit::WeightMode;
use crate::state::ControlState;

/// The Admin service.
#[derive(Debug)]
pub(crate) struct AdminService {
    state: Arc<ControlState>,
    stop: watch::Receiver<()>,
    forwarder: Forwarder,
}

/// On a follower, sends the call to the leader instead (`$method` of the leader's Admin). A
/// follower that knows no leader (an election in progress) refuses a change with `NOT_LEADER`
/// but answers a read itself (`read`): its view, its settings, an empty ledger.
macro_rules! or_forward {
    ($self:ident, $req:ident, $method:ident) => {
        if let Some(leader) = $self.state.leadership().forward_to() {
            return $self.forwarder.forward(leader, $req, |mut c, r| async move { c.$method(r).await }).await;
        }
    };
    ($self:ident, $req:ident, $method:ident, read) => {
        if let Some(Some(leader)) = $self.state.leadership().forward_to() {
            return $self
                .forwarder
                .forward(Some(leader), $req, |mut c, r| async move { c.$method(r).await })
                .await;
        }
    };
}

impl AdminService {
    pub(super) fn new(
        state: Arc<ControlState>,
        stop: watch::Receiver<()>,
        peers: Option<Arc<crate::tls::PeerTls>>,
        plaintext_leaders: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        Self { state, stop, forwarder: Forwarder::new(peers, plaintext_leaders) }
    }

    /// The settings as `GetConfig` shows them, with how W is chosen, every pool's fit and the
    /// leadership.
    fn config(&self, s: &crate::settings::Settings) -> pb::Config {
        let (mode, pools) = self.state.weight_fits();
        let (view, warm) = self.state.leadership_view();
        wire::config(s, mode, &pools, wire::leadership(&view, warm))
    }

    fn drain(
        &self,
        req: Request<pb::DrainTargetRequest>,
        drained: bool,
    ) -> Result<Response<pb::ListTargetsResponse>, Status> {
        let ask = convert::drain_request(req.into_inner()).map_err(ControlError::from)?;
        if ask.stop_when_drained {
            let invalid = convert::ConvertError {
                field: "stop_when_drained",
                problem: convert::Problem::NotAllowed("ResumeTarget does not stop a worker"),
            };
            return Err(ControlError::from(invalid).into());
        }
        let rows = self.state.set_drained(&ask.worker, ask.rank, drained)?;
        Ok(Response::new(wire::targets(&rows, self.state.engine())))
    }

    /// `DrainTarget` with `stop_when_drained`: the worker's launcher is asked, through etcd, to
    /// drain and stop it as it does on SIGTERM (manual/operations/rollouts.md); nothing is
    /// persisted here.
    async fn retire(&self, worker: WorkerId) -> Result<Response<pb::ListTargetsResponse>, Status> {
        let rows: Vec<_> =
            self.state.targets(None, None).into_iter().filter(|r| r.slot.target.worker == worker).collect();
        if rows.is_empty() {
            return Err(ControlError::UnknownWorker(worker).into());
        }
        let etcd = self.state.etcd().ok_or(ControlError::NoRegistry)?;
        infera_registry::retire::ask(etcd, &worker, "Admin/DrainTarget").await.map_err(|e| {
            ControlError::RegistryUnavailable { worker: worker.clone(), reason: e.to_string() }
        })?;
        tracing::info!(%worker, "asked the worker's launcher to drain and stop it (Admin/DrainTarget)");
        Ok(Response::new(wire::targets(&rows, self.state.engine())))
    }
}

type DecisionStream = Pin<Box<dyn Stream<Item = Result<pb::DecisionEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Admin for AdminService {
    async fn get_config(&self, req: Request<pb::GetConfigRequest>) -> Result<Response<pb::Config>, Status> {
        or_forward!(self, req, get_config, read);
        Ok(Response::new(self.config(&self.state.settings())))
    }

    async fn set_decode_request_weight(
        &self,
        req: Request<pb::SetDecodeRequestWeightRequest>,
    ) -> Result<Response<pb::Config>, Status> {
        or_forward!(self, req, set_decode_request_weight);
        let m = req.get_ref();
        let w = convert::request_weight("decode_request_weight", m.decode_request_weight)
            .map_err(ControlError::from)?;
        let mode = if m.auto { WeightMode::Auto } else { WeightMode::Pinned };
        Ok(Response::new(self.config(&self.state.set_weight(w, mode)?)))
    }

    async fn set_decode_input_demand(
        &self,
        req: Request<pb::SetDecodeInputDemandRequest>,
    ) -> Result<Response<pb::Config>, Status> {
        or_forward!(self, req, set_decode_input_demand);
        let mode = convert::decode_input_demand("decode_input_demand", req.get_ref().decode_input_demand)
            .map_err(ControlError::from)?;
        Ok(Response::new(self.config(&self.state.set_mode(mode)?)))
    }

    async fn set_prefill_overlap_credit(
        &self,
        req: Request<pb::SetPrefillOverlapCreditRequest>,
    ) -> Result<Response<pb::Config>, Status> {
        or_forward!(self, req, set_prefill_overlap_credit);
        let c = convert::overlap_credit("prefill_overlap_credit", req.get_ref().prefill_overlap_credit)
            .map_err(ControlError::from)?;
        Ok(Response::new(self.config(&self.state.set_overlap_credit(c)?)))
    }

    async fn list_targets(
        &self,
        req: Request<pb::ListTargetsRequest>,
    ) -> Result<Response<pb::ListTargetsResponse>, Status> {
        or_forward!(self, req, list_targets, read);
        Ok(Response::new(super::list_targets(&self.state, req.into_inner())?))
    }

    async fn list_reservations(
        &self,
        req: Request<pb::ListReservationsRequest>,
    ) -> Result<Response<pb::ListReservationsResponse>, Status> {
        or_forward!(self, req, list_reservations, read);
        let m = req.into_inner();
        let lease = match m.lease_id.as_str() {
            "" => None,
            l => Some(convert::lease_id("lease_id", l).map_err(ControlError::from)?),
        };
        let worker = convert::name_filter(m.worker_id);
        let rows = self.state.reservations(lease, worker.as_deref());
        Ok(Response::new(pb::ListReservationsResponse {
            reservations: rows.iter().map(wire::reservation).collect(),
        }))
    }

    async fn drain_target(
        &self,
        req: Request<pb::DrainTargetRequest>,
    ) -> Result<Response<pb::ListTargetsResponse>, Status> {
        or_forward!(self, req, drain_target);
        if req.get_ref().stop_when_drained {
            let ask = convert::drain_request(req.into_inner()).map_err(ControlError::from)?;
            return self.retire(ask.worker).await;
        }
        self.drain(req, true)
    }

    async fn resume_target(
        &self,
        req: Request<pb::DrainTargetRequest>,
    ) -> Result<Response<pb::ListTargetsResponse>, Status> {
        or_forward!(self, req, resume_target);
        self.drain(req, false)
    }

    type WatchDecisionsStream = DecisionStream;

    async fn watch_decisions(
        &self,
        req: Request<pb::WatchDecisionsRequest>,
    ) -> Result<Response<Self::WatchDecisionsStream>, Status> {
        if let Some(leader) = self.state.leadership().forward_to() {
            // A stream is not forwarded: watch the leader itself.
            return Err(ControlError::NotLeader { leader, lapsed: false }.into());
        }
        let m = req.into_inner();
        let kind = convert::kind_filter("kind", m.kind).map_err(ControlError::from)?;
        let model = convert::name_filter(m.model);
        // A watcher that falls more than the hub's capacity behind skips the oldest events
        // (logged here) and goes on; picks never wait for watchers.
        let events = BroadcastStream::new(self.state.decisions().subscribe()).filter_map(move |event| {
            let event = match event {
                Ok(d) => d,
                Err(BroadcastStreamRecvError::Lagged(n)) => {
                    tracing::warn!(skipped = n, "decision watcher too slow; events skipped");
                    return std::future::ready(None);
                }
            };
            let keep = kind.is_none_or(|k| event.kind == k)
                && model.as_deref().is_none_or(|m| event.model.as_str() == m);
            std::future::ready(keep.then(|| Ok(wire::decision(&event))))
        });
        let mut stop = self.stop.clone();
        let stopped = async move {
            let _ = stop.changed().await;
        };
        Ok(Response::new(Box::pin(events.take_until(stopped))))
    }
}

//! The proxy's link to infera-control: the lease (opened, renewed every TTL/3, reopened when
//! control forgets it), picks with a deadline and a local fallback, releases retried until
//! control has them, and the target list refreshed for the fallback.
//!
//! Serving never stops because control is down: a pick that does not answer within
//! `--pick-timeout-ms`, or any pick while the proxy holds no lease, is routed locally from the
//! last known target list (least of this proxy's in-flight legs) and counted.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, router_client::RouterClient};
use rand::{SeedableRng, rngs::SmallRng};
use tonic::Status;
use tonic::transport::{Channel, Endpoint as GrpcEndpoint};

use crate::config::Config;
use crate::error::{Leg, ProxyError};
use crate::facts::Facts;
use crate::metrics::ProxyMetrics;
use crate::targets::{Endpoint, LocalLoad, PickKind, TargetList};

/// How long a pick the proxy stopped waiting for is still awaited (to release what it booked).
const LATE_PICK_LIMIT: Duration = Duration::from_secs(10);

/// A chosen target for one leg. It is released exactly once: by [`Pick::release`], or — if
/// whatever holds it is dropped first (the client went away) — as `CANCELLED` on drop.
#[derive(Debug)]
pub struct Pick {
    /// Where the leg goes.
    pub endpoint: Endpoint,
    /// Control's reservation and the lease it was booked under; `None` for a local fallback.
    reservation: Option<(String, String)>,
    link: Arc<ControlLink>,
    released: bool,
}

impl Pick {
    fn new(link: &Arc<ControlLink>, endpoint: Endpoint, reservation: Option<(String, String)>) -> Self {
        link.load.start(&endpoint);
        Self { endpoint, reservation, link: link.clone(), released: false }
    }

    /// Whether control booked it (false for a local fallback).
    pub fn booked(&self) -> bool {
        self.reservation.is_some()
    }

    /// Ends the leg with `reason`.
    pub fn release(mut self, reason: pb::ReleaseReason) {
        self.end(reason);
    }

    fn end(&mut self, reason: pb::ReleaseReason) {
        if !std::mem::replace(&mut self.released, true) {
            self.link.release_reservation(&self.endpoint, self.reservation.take(), reason);
        }
    }
}

impl Drop for Pick {
    fn drop(&mut self) {
        self.end(pb::ReleaseReason::Cancelled);
    }
}

/// A pick RPC in flight; if the proxy stops waiting for it (deadline, or the request is
/// dropped), what control books is released as soon as the answer arrives.
struct PendingPick {
    call: Option<PickCall>,
    link: Arc<ControlLink>,
    lease: String,
}

/// A pick RPC, boxed so that it can move into a background task when the proxy stops waiting.
type PickCall = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<tonic::Response<pb::PickResponse>, Status>> + Send>,
>;

impl Drop for PendingPick {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.link.release_late(call, self.lease.clone());
        }
    }
}

/// Why a pick found nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickError {
    /// No worker serves the model.
    UnknownModel,
    /// The model has no pool for this kind (a prefill pick on an aggregated model).
    NoPool,
    /// The pool has no eligible target.
    NoTarget,
    /// Control rejected the request's values (e.g. an input far beyond any context).
    Invalid(String),
}

/// The link.
#[derive(Debug)]
pub struct ControlLink {
    client: RouterClient<Channel>,
    name: String,
    lease_ttl: Duration,
    pick_timeout: Duration,
    targets_refresh: Duration,
    lease: Arc<RwLock<Option<String>>>,
    lease_lost: tokio::sync::Notify,
    targets: RwLock<Arc<TargetList>>,
    load: LocalLoad,
    rng: Mutex<SmallRng>,
    metrics: Arc<ProxyMetrics>,
}

impl ControlLink {
    /// A link to `config.control`; nothing is sent until [`ControlLink::spawn`].
    pub fn new(config: &Config, name: String, metrics: Arc<ProxyMetrics>) -> Arc<Self> {
        let channel = GrpcEndpoint::from(config.control.clone())
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .connect_lazy();
        Arc::new(Self {
            client: RouterClient::new(channel),
            name,
            lease_ttl: config.lease_ttl,
            pick_timeout: config.pick_timeout,
            targets_refresh: config.targets_refresh,
            lease: Arc::new(RwLock::new(None)),
            lease_lost: tokio::sync::Notify::new(),
            targets: RwLock::new(Arc::new(TargetList::default())),
            load: LocalLoad::default(),
            rng: Mutex::new(SmallRng::from_os_rng()),
            metrics,
        })
    }

    /// Starts the lease and target-list loops; they end when `stop` fires.
    pub fn spawn(self: &Arc<Self>, stop: tokio::sync::watch::Receiver<()>) {
        tokio::spawn(self.clone().lease_loop(stop.clone()));
        tokio::spawn(self.clone().targets_loop(stop));
    }

    /// The lease held now.
    pub fn lease(&self) -> Option<String> {
        self.lease.read().expect("lease lock").clone()
    }

    fn lease_handle(&self) -> Arc<RwLock<Option<String>>> {
        self.lease.clone()
    }

    /// The last known target list.
    pub fn targets(&self) -> Arc<TargetList> {
        self.targets.read().expect("targets lock").clone()
    }

    /// The prompt's page hashes for a KV-aware prefill pick: SGLang's page hash over the token
    /// ids, at the page size of the model's prefill workers. Empty for decode picks, without token
    /// ids (no tokenizer, an ambiguous prompt) or before the target list is known.
    fn page_hashes(&self, kind: PickKind, facts: &Facts, model: &str) -> (Vec<i64>, u32) {
        let (PickKind::Prefill, Some(ids)) = (kind, &facts.token_ids) else { return (Vec::new(), 0) };
        match self.targets().prefill_page_size(model).filter(|p| *p > 0) {
            Some(page_size) => {
                let hashes = infera_kv::hash::page_hashes(ids, page_size as usize);
                (hashes.into_iter().map(|h| h.0).collect(), page_size)
            }
            None => (Vec::new(), 0),
        }
    }

    /// Picks a target for one leg: control when it answers in time, the local fallback
    /// otherwise.
    pub async fn pick(
        self: &Arc<Self>,
        kind: PickKind,
        facts: &Facts,
        model: &str,
    ) -> Result<Pick, PickError> {
        if let Some(lease) = self.lease() {
            let (page_hashes, page_size) = self.page_hashes(kind, facts, model);
            let msg = pb::PickRequest {
                lease_id: lease.clone(),
                request_id: facts.request_id.clone(),
                model: model.to_owned(),
                input_tokens: facts.input_tokens,
                session_key: facts.session.clone().unwrap_or_default(),
                page_hashes,
                page_size,
            };
            let mut req = tonic::Request::new(msg);
            // The RPC itself may take longer than the pick deadline: if control books after
            // the proxy gave up, the late answer is released (see below), never leaked.
            req.set_timeout(LATE_PICK_LIMIT);
            infera_proto::telemetry::inject_metadata(&tracing::Span::current(), req.metadata_mut());
            let mut client = self.client.clone();
            let call: PickCall = Box::pin(async move {
                match kind {
                    PickKind::Prefill => client.pick_prefill(req).await,
                    PickKind::Decode => client.pick_decode(req).await,
                }
            });
            let mut pending = PendingPick { call: Some(call), link: self.clone(), lease: lease.clone() };
            let answer = tokio::select! {
                answer = pending.call.as_mut().expect("set above") => {
                    pending.call = None;
                    Ok(answer)
                }
                // `pending` is dropped below with its call: a late answer is released.
                () = tokio::time::sleep(self.pick_timeout) => Err(()),
            };
            drop(pending);
            match answer {
                Ok(Ok(resp)) => {
                    let resp = resp.into_inner();
                    if let (Some(worker), Some(target)) = (&resp.worker, &resp.target) {
                        let endpoint = Endpoint::from_wire(worker, target.dp_rank);
                        return Ok(Pick::new(self, endpoint, Some((resp.reservation_id, lease))));
                    }
                    tracing::warn!("control answered a pick without a target; routing locally");
                }
                Ok(Err(status)) => match StatusReason::of(&status).known() {
                    Some(ErrorReason::UnknownModel) => return Err(PickError::UnknownModel),
                    Some(ErrorReason::NoPool) => return Err(PickError::NoPool),
                    Some(ErrorReason::NoEligibleTarget) => return Err(PickError::NoTarget),
                    Some(ErrorReason::InvalidArgument) => {
                        return Err(PickError::Invalid(status.message().to_owned()));
                    }
                    Some(ErrorReason::UnknownLease) => {
                        tracing::warn!(%lease, "control does not know this proxy's lease; reopening it");
                        self.forget_lease(&lease);
                    }
                    _ => tracing::debug!(code = ?status.code(), "pick failed; routing locally"),
                },
                Err(()) => tracing::debug!(timeout = ?self.pick_timeout, "pick timed out; routing locally"),
            }
        }
        self.fallback(kind, model)
    }

    /// A pick the proxy stopped waiting for may still be booked by control: wait for it in the
    /// background and release what it booked at once.
    fn release_late(self: &Arc<Self>, call: PickCall, lease: String) {
        let link = self.clone();
        tokio::spawn(async move {
            if let Ok(resp) = call.await {
                let resp = resp.into_inner();
                if let (Some(worker), Some(target)) = (&resp.worker, &resp.target) {
                    link.metrics.late_pick();
                    let endpoint = Endpoint::from_wire(worker, target.dp_rank);
                    Pick::new(&link, endpoint, Some((resp.reservation_id, lease)))
                        .release(pb::ReleaseReason::Cancelled);
                }
            }
        });
    }

    fn fallback(self: &Arc<Self>, kind: PickKind, model: &str) -> Result<Pick, PickError> {
        let list = self.targets();
        self.metrics.fallback(kind);
        let pd = list.is_pd(model);
        if pd.is_none() {
            return Err(if list.is_empty() { PickError::NoTarget } else { PickError::UnknownModel });
        }
        if kind == PickKind::Prefill && pd == Some(false) {
            return Err(PickError::NoPool);
        }
        let chosen = self.load.choose(&list, model, kind, &mut *self.rng.lock().expect("rng lock"));
        let endpoint = chosen.ok_or(PickError::NoTarget)?;
        Ok(Pick::new(self, endpoint, None))
    }

    /// Ends a leg: the local count at once, control's reservation in the background, retried
    /// while control is unreachable and the lease it was booked under is still this proxy's.
    fn release_reservation(
        &self,
        endpoint: &Endpoint,
        reservation: Option<(String, String)>,
        reason: pb::ReleaseReason,
    ) {
        self.load.end(endpoint);
        self.metrics.release(reason);
        let Some((reservation, lease)) = reservation else { return };
        let (client, metrics) = (self.client.clone(), self.metrics.clone());
        let held_lease = self.lease_handle();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let msg = pb::ReleaseRequest { reservation_id: reservation.clone(), reason: reason as i32 };
                match client.clone().release(msg).await {
                    Ok(_) => return,
                    Err(s)
                        if matches!(
                            StatusReason::of(&s).known(),
                            Some(ErrorReason::UnknownReservation | ErrorReason::InvalidArgument)
                        ) =>
                    {
                        tracing::debug!(%reservation, status = %s.message(), "release not needed");
                        return;
                    }
                    Err(s) => {
                        if held_lease.read().expect("lease lock").as_deref() != Some(lease.as_str()) {
                            // The lease ended: control released everything it held.
                            return;
                        }
                        metrics.control_error("release");
                        tracing::debug!(%reservation, code = ?s.code(), "release failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                }
            }
        });
    }

    /// Closes the lease at shutdown (best effort): control releases what it still holds.
    pub async fn close(&self) {
        let held = self.lease.write().expect("lease lock").take();
        if let Some(lease) = held {
            let req = pb::CloseLeaseRequest { lease_id: lease };
            let _ = tokio::time::timeout(Duration::from_secs(1), self.client.clone().close_lease(req)).await;
        }
    }

    fn forget_lease(&self, lease: &str) {
        let mut held = self.lease.write().expect("lease lock");
        if held.as_deref() == Some(lease) {
            *held = None;
            // Wake the lease loop: reopen now, not at the next keep-alive.
            self.lease_lost.notify_one();
        }
    }

    async fn lease_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<()>) {
        let mut backoff = Duration::from_millis(50);
        loop {
            let wait = match self.lease() {
                None => match self.open_lease().await {
                    Ok(lease) => {
                        tracing::info!(%lease, holder = %self.name, "lease opened with control");
                        *self.lease.write().expect("lease lock") = Some(lease);
                        backoff = Duration::from_millis(50);
                        self.lease_ttl / 3
                    }
                    Err(e) => {
                        self.metrics.control_error("open_lease");
                        tracing::warn!(error = %e.message(), retry_in = ?backoff, "cannot open a lease with control");
                        let wait = backoff;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        wait
                    }
                },
                Some(lease) => {
                    let req = pb::KeepAliveRequest { lease_id: lease.clone() };
                    match tokio::time::timeout(self.lease_ttl / 3, self.client.clone().keep_alive(req)).await
                    {
                        Ok(Ok(_)) => self.lease_ttl / 3,
                        Ok(Err(s)) if StatusReason::of(&s).known() == Some(ErrorReason::UnknownLease) => {
                            tracing::warn!(%lease, "control forgot this proxy's lease (expired or control restarted); reopening");
                            self.forget_lease(&lease);
                            Duration::ZERO
                        }
                        _ => {
                            self.metrics.control_error("keep_alive");
                            tracing::warn!(%lease, "keep-alive failed; control unreachable");
                            Duration::from_millis(250).min(self.lease_ttl / 3)
                        }
                    }
                }
            };
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.lease_lost.notified() => {}
            }
        }
    }

    async fn open_lease(&self) -> Result<String, Status> {
        let ttl_ms = u32::try_from(self.lease_ttl.as_millis()).unwrap_or(u32::MAX);
        let req = pb::OpenLeaseRequest { holder: self.name.clone(), ttl_ms };
        let lease = tokio::time::timeout(Duration::from_secs(2), self.client.clone().open_lease(req))
            .await
            .map_err(|_| Status::deadline_exceeded("open lease timed out"))??;
        Ok(lease.into_inner().lease_id)
    }

    async fn targets_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<()>) {
        let mut known = false;
        loop {
            let req = pb::ListTargetsRequest::default();
            match tokio::time::timeout(Duration::from_secs(2), self.client.clone().list_targets(req)).await {
                Ok(Ok(resp)) => {
                    let list = TargetList::new(resp.into_inner().targets);
                    if !known {
                        tracing::info!(models = ?list.models(), "target list received from control");
                        known = true;
                    }
                    *self.targets.write().expect("targets lock") = Arc::new(list);
                }
                _ => self.metrics.control_error("list_targets"),
            }
            let wait = if known { self.targets_refresh } else { Duration::from_millis(100) };
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

impl PickError {
    /// The client-facing error for a pick of `leg` for `model`.
    pub fn into_proxy_error(self, model: &str, leg: Leg) -> ProxyError {
        match self {
            Self::UnknownModel => ProxyError::UnknownModel(model.to_owned()),
            Self::NoPool | Self::NoTarget => ProxyError::NoTarget { model: model.to_owned(), leg },
            Self::Invalid(_) => {
                ProxyError::BadRequest("the request exceeds what control accepts (input tokens)")
            }
        }
    }
}

//! The proxy's lease with control: every reservation is booked under it. Opened at start and
//! renewed every TTL/3; reopened at once when control says it does not know it (it expired, or
//! control restarted); closed at shutdown so control releases what it still holds.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use infera_proto::convert;
use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, router_client::RouterClient};
use infera_proto::types::LeaseId;
use tonic::Status;
use tonic::transport::Channel;

use crate::metrics::ProxyMetrics;

/// The lease held now, if any.
#[derive(Debug)]
pub(super) struct Lease {
    /// Who holds it, shown in control's `ListReservations`.
    holder: String,
    /// The TTL asked for.
    ttl: Duration,
    held: RwLock<Option<LeaseId>>,
    /// Wakes the loop when a pick found the lease forgotten.
    lost: tokio::sync::Notify,
}

impl Lease {
    /// No lease yet; [`Lease::run`] opens one.
    pub(super) fn new(holder: String, ttl: Duration) -> Self {
        Self { holder, ttl, held: RwLock::new(None), lost: tokio::sync::Notify::new() }
    }

    /// The lease held now.
    pub(super) fn get(&self) -> Option<LeaseId> {
        *self.held.read().expect("lease lock")
    }

    /// Whether `lease` is still the one held (a lease that ended took its reservations with it).
    pub(super) fn holds(&self, lease: LeaseId) -> bool {
        self.get() == Some(lease)
    }

    /// Control does not know `lease`: drop it (if it is still the one held) and reopen now, not at
    /// the next keep-alive.
    pub(super) fn forget(&self, lease: LeaseId) {
        let mut held = self.held.write().expect("lease lock");
        if *held == Some(lease) {
            *held = None;
            self.lost.notify_one();
        }
    }

    /// Closes the lease (best effort, one second at most).
    pub(super) async fn close(&self, mut client: RouterClient<Channel>) {
        let held = self.held.write().expect("lease lock").take();
        if let Some(lease) = held {
            let req = pb::CloseLeaseRequest { lease_id: lease.to_string() };
            let _ = tokio::time::timeout(Duration::from_secs(1), client.close_lease(req)).await;
        }
    }

    /// Opens, renews and reopens the lease until `stop` fires.
    pub(super) async fn run(
        self: Arc<Self>,
        client: RouterClient<Channel>,
        metrics: Arc<ProxyMetrics>,
        mut stop: tokio::sync::watch::Receiver<()>,
    ) {
        let mut backoff = Duration::from_millis(50);
        loop {
            let wait = match self.get() {
                None => match self.open(client.clone()).await {
                    Ok(lease) => {
                        tracing::info!(%lease, holder = %self.holder, "lease opened with control");
                        *self.held.write().expect("lease lock") = Some(lease);
                        backoff = Duration::from_millis(50);
                        self.ttl / 3
                    }
                    Err(e) => {
                        metrics.control_error("open_lease");
                        tracing::warn!(error = %e.message(), retry_in = ?backoff, "cannot open a lease with control");
                        let wait = backoff;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        wait
                    }
                },
                Some(lease) => {
                    let req = pb::KeepAliveRequest { lease_id: lease.to_string() };
                    match tokio::time::timeout(self.ttl / 3, client.clone().keep_alive(req)).await {
                        Ok(Ok(_)) => self.ttl / 3,
                        Ok(Err(s)) if StatusReason::of(&s).known() == Some(ErrorReason::UnknownLease) => {
                            tracing::warn!(%lease, "control forgot this proxy's lease (expired or control restarted); reopening");
                            self.forget(lease);
                            Duration::ZERO
                        }
                        _ => {
                            metrics.control_error("keep_alive");
                            tracing::warn!(%lease, "keep-alive failed; control unreachable");
                            Duration::from_millis(250).min(self.ttl / 3)
                        }
                    }
                }
            };
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.lost.notified() => {}
            }
        }
    }

    async fn open(&self, mut client: RouterClient<Channel>) -> Result<LeaseId, Status> {
        let ttl_ms = u32::try_from(self.ttl.as_millis()).unwrap_or(u32::MAX);
        let req = pb::OpenLeaseRequest { holder: self.holder.clone(), ttl_ms };
        let lease = tokio::time::timeout(Duration::from_secs(2), client.open_lease(req))
            .await
            .map_err(|_| Status::deadline_exceeded("open lease timed out"))??;
        convert::lease_id("lease_id", &lease.into_inner().lease_id)
            .map_err(|e| Status::internal(format!("control answered OpenLease with {e}")))
    }
}

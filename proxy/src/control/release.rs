//! A leg's end: the proxy's own in-flight count at once, control's reservation in the
//! background, retried while control is unreachable and the lease it was booked under is still
//! this proxy's (when a lease ends, control releases everything it held).

use std::sync::Arc;
use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, router_client::RouterClient};
use infera_proto::types::{LeaseId, ReleaseReason, ReservationId};
use tonic::transport::Channel;

use super::lease::Lease;
use crate::metrics::ProxyMetrics;
use crate::targets::{Endpoint, LocalLoad};

/// What control booked for a leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Booking {
    /// The reservation to release.
    pub(super) reservation: ReservationId,
    /// The lease it was booked under.
    pub(super) lease: LeaseId,
}

/// Starts and ends legs.
#[derive(Debug)]
pub(super) struct Releaser {
    client: RouterClient<Channel>,
    lease: Arc<Lease>,
    /// This proxy's legs in flight per target: the fallback's load signal.
    pub(super) load: LocalLoad,
    metrics: Arc<ProxyMetrics>,
}

impl Releaser {
    /// Releases through `client` while `lease` holds the booking's lease.
    pub(super) fn new(
        client: RouterClient<Channel>,
        lease: Arc<Lease>,
        load: LocalLoad,
        metrics: Arc<ProxyMetrics>,
    ) -> Self {
        Self { client, lease, load, metrics }
    }

    /// A leg starts on `endpoint`.
    pub(super) fn start(&self, endpoint: &Endpoint) {
        self.load.start(endpoint);
    }

    /// A leg on `endpoint` ended with `reason`; `booking` is control's part, `None` for a local
    /// fallback.
    pub(super) fn release(&self, endpoint: &Endpoint, booking: Option<Booking>, reason: ReleaseReason) {
        self.load.end(endpoint);
        self.metrics.release(reason);
        let Some(Booking { reservation, lease }) = booking else { return };
        let (client, metrics, held) = (self.client.clone(), self.metrics.clone(), self.lease.clone());
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let msg = pb::ReleaseRequest {
                    reservation_id: reservation.to_string(),
                    reason: pb::ReleaseReason::from(reason) as i32,
                };
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
                        if !held.holds(lease) {
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
}

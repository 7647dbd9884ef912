//! A leg's end: the proxy's own in-flight count at once, control's reservation in the
//! background, retried while control is unreachable and the lease it was booked under is still
//! this proxy's (when a lease ends, control releases everything it held).

use std::sync::Arc;
use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb;
use infera_proto::types::{LeaseId, LegFailure, ReleaseReason, ReservationId};

use super::controls::Controls;
use super::lease::Lease;
use super::legs::{LegFacts, LegId, Legs};
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
    controls: Arc<Controls>,
    lease: Arc<Lease>,
    /// This proxy's legs in flight per target: the fallback's load signal.
    pub(super) load: LocalLoad,
    /// Every leg in flight, for re-declaring.
    pub(super) legs: Legs,
    metrics: Arc<ProxyMetrics>,
}

impl Releaser {
    /// Releases through the current control while `lease` holds the booking's lease.
    pub(super) fn new(controls: Arc<Controls>, lease: Arc<Lease>, metrics: Arc<ProxyMetrics>) -> Self {
        Self { controls, lease, load: LocalLoad::default(), legs: Legs::default(), metrics }
    }

    /// A leg starts on `endpoint`, booked as `booking` (`None`: a local pick).
    pub(super) fn start(&self, endpoint: &Endpoint, facts: LegFacts, booking: Option<Booking>) -> LegId {
        self.load.start(endpoint);
        self.legs.start(facts, booking)
    }

    /// The leg `leg` on `endpoint` ended with `reason`: control's reservation that stands for it
    /// now (if any) is released.
    pub(super) fn release(
        &self,
        endpoint: &Endpoint,
        leg: LegId,
        reason: ReleaseReason,
        failure: Option<LegFailure>,
    ) {
        self.load.end(endpoint);
        self.metrics.release(reason);
        if let Some(booking) = self.legs.end(leg) {
            self.release_booking(booking, reason, failure);
        }
    }

    /// Releases one reservation of control's (a failed leg: with how it failed), retried while
    /// its lease is held.
    pub(super) fn release_booking(
        &self,
        booking: Booking,
        reason: ReleaseReason,
        failure: Option<LegFailure>,
    ) {
        let Booking { reservation, lease } = booking;
        let (controls, metrics, held) = (self.controls.clone(), self.metrics.clone(), self.lease.clone());
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let msg = pb::ReleaseRequest {
                    reservation_id: reservation.to_string(),
                    reason: pb::ReleaseReason::from(reason) as i32,
                    failure: failure.map_or(0, |f| pb::LegFailure::from(f) as i32),
                };
                match controls.current().1.release(msg).await {
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
                            // The lease ended (control released everything it held), or its
                            // control is gone: the leg was re-declared under the next lease.
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

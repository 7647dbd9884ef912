//! A leg's end: the proxy's own in-flight count at once, control's reservation in the
//! background through the [`outbox`] (coalesced, retried while control is unreachable and the
//! lease it was booked under is still this proxy's).

mod outbox;

use std::sync::{Arc, OnceLock};

use infera_proto::types::{LeaseId, LegFailure, Release, ReleaseReason};
use tokio::sync::mpsc;

use super::controls::Controls;
use super::credential::RouterCalls;
use super::lease::Lease;
use super::legs::{Booking, LegFacts, LegId, Legs};
use crate::metrics::ProxyMetrics;
use crate::targets::{Endpoint, LocalLoad};
use outbox::Queued;

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
    /// Releases on their way to control; the outbox task starts with the first.
    outbox: OnceLock<mpsc::UnboundedSender<Queued>>,
}

/// The outbox's destination: the current control, under this proxy's lease.
#[derive(Clone, Debug)]
struct ToControl {
    controls: Arc<Controls>,
    lease: Arc<Lease>,
    metrics: Arc<ProxyMetrics>,
}

impl outbox::Destination for ToControl {
    type Calls = RouterCalls;
    fn calls(&self) -> Self::Calls {
        self.controls.current().1
    }
    fn holds(&self, lease: LeaseId) -> bool {
        self.lease.holds(lease)
    }
    fn failed(&self) {
        self.metrics.control_error("release");
    }
}

impl Releaser {
    /// Releases through the current control while `lease` holds the booking's lease.
    pub(super) fn new(controls: Arc<Controls>, lease: Arc<Lease>, metrics: Arc<ProxyMetrics>) -> Self {
        let (load, legs, outbox) = (LocalLoad::default(), Legs::default(), OnceLock::new());
        Self { controls, lease, load, legs, metrics, outbox }
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
            self.release_reservation(booking.lease, Release { id: booking.reservation, reason, failure });
        }
    }

    /// Sends `release` (of a reservation booked under `lease`) to control through the outbox:
    /// retried while `lease` is held, coalesced with the releases that end with it.
    pub(super) fn release_reservation(&self, lease: LeaseId, release: Release) {
        let queue = self.outbox.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let to = ToControl {
                controls: self.controls.clone(),
                lease: self.lease.clone(),
                metrics: self.metrics.clone(),
            };
            tokio::spawn(outbox::run(rx, to));
            tx
        });
        // The outbox task lives as long as this sender (it is never closed before).
        let _ = queue.send(Queued { lease, release });
    }
}

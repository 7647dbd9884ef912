//! What the core hands back: picks, releases, expiries and the rows operators list, each named.

use std::sync::Arc;
use std::time::Duration;

use infera_proto::types::{
    DecodeInputDemand, LeaseId, ModelName, PickKind, RequestWeight, ReservationId, Role, Target, WorkerId,
    WorkerRecord,
};

use crate::decisions::{CandidateTerms, Decision};
use crate::ledger::Reservation;
use crate::target::Load;
use crate::view::Slot;

/// A target's load after a booking or release, for the per-target gauges.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadChange {
    /// The target whose load changed.
    pub target: Target,
    /// Its worker's role.
    pub role: Role,
    /// Its load now.
    pub load: Load,
}

/// A successful pick.
#[derive(Clone, Debug)]
pub struct Picked {
    /// The reservation booked; the proxy releases it when the request ends.
    pub reservation: ReservationId,
    /// The chosen target's worker, whose URL the proxy sends the request to.
    pub worker: Arc<WorkerRecord>,
    /// The chosen target's terms before the booking.
    pub chosen: CandidateTerms,
    /// The mode in force.
    pub mode: DecodeInputDemand,
    /// W in force (decode picks; zero for prefill picks).
    pub weight: RequestWeight,
    /// Shadow mode: whether the legacy choice is also a lowest-cost one.
    pub agree: Option<bool>,
    /// The target's load after the booking.
    pub change: LoadChange,
    /// The full decision, when asked for.
    pub decision: Option<Decision>,
    /// Every candidate was ejected (or excluded), so the ejections were ignored for this pick.
    pub bypassed_ejections: bool,
    /// Prefill: the most prompt tokens any candidate was credited as holding.
    pub best_cached_tokens: u64,
}

/// A reservation as operators list it.
#[derive(Clone, Debug)]
pub struct ReservationRow {
    /// The reservation: lease, leg, target key, tokens booked and when.
    pub reservation: Reservation,
    /// Its target's name.
    pub target: Target,
    /// Its lease's holder ("" once the lease is gone).
    pub holder: String,
    /// The identity that owns it (its lease's).
    pub owner: Option<crate::identity::Identity>,
}

/// An ended reservation and the load it left behind.
#[derive(Clone, Debug)]
pub struct Ended {
    /// The reservation that ended.
    pub reservation: Reservation,
    /// Its target's load after the release.
    pub change: LoadChange,
}

/// A release that ended a reservation.
#[derive(Clone, Debug)]
pub struct ReleasedNow {
    /// The reservation's leg.
    pub kind: PickKind,
    /// Its target's load after the release.
    pub change: LoadChange,
    /// A prefill that reached its end of stream: its model and the model's median prefill
    /// phase with it counted.
    pub phase_median: Option<(ModelName, Duration)>,
    /// What the release did to breakers (its target's, or with a refused connection every rank
    /// of its worker's): the targets ejected or re-admitted.
    pub health: Vec<(Target, crate::ejection::Transition)>,
    /// Failure reports that counted for nothing: another identity witnesses the target.
    pub discounted: usize,
}

/// What a release did: [`ReleaseEffect::Ended`] the reservation now, or found it
/// [`ReleaseEffect::AlreadyEnded`] by an earlier release or its lease's expiry (releases are
/// idempotent: a repeated one is not an error and changes nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseEffect {
    /// This release ended the reservation.
    Ended,
    /// An earlier release (or lease expiry) had ended it.
    AlreadyEnded,
}

/// A lease that expired, with the reservations its expiry ended (the ledger's
/// [`Expired`](crate::ledger::Expired), with target names).
#[derive(Clone, Debug)]
pub struct LeaseExpired {
    /// The lease that ran out.
    pub lease: LeaseId,
    /// Its holder (the proxy's name).
    pub holder: String,
    /// The identity that owned it.
    pub owner: crate::identity::Identity,
    /// What it still held.
    pub ended: Vec<Ended>,
}

/// A lease just opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenedLease {
    /// The lease's id, which the proxy's keep-alives and picks carry.
    pub lease: LeaseId,
    /// The TTL granted (the default, or the one asked for clamped to the range).
    pub ttl: Duration,
}

/// A worker being drained before its stop, and what the ledger still holds on its ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainHolding {
    /// The worker.
    pub worker: WorkerId,
    /// Requests booked on its ranks.
    pub held_requests: u64,
}

/// A target as operators list it: the view's slot and the ledger's load.
#[derive(Clone, Debug)]
pub struct TargetRow {
    /// What the view knows of it.
    pub slot: Slot,
    /// What it holds.
    pub load: Load,
    /// Outlier ejection: healthy, ejected or probing.
    pub health: crate::ejection::Health,
    /// The tightest ITL target (ms) among the requests it holds under fleet admission; `None`
    /// when it holds none.
    pub itl_limit_ms: Option<u32>,
}

//! Legs a proxy re-declares under a new lease: after a control restart or a failover (booked by
//! an earlier control, whose ledger is gone) and the local fallback picks it made while no control
//! answered. Each is booked as a pick would have booked it, with its age, so that the ledger of a
//! new leader equals what is in flight; a prefill and a decode leg of one request find each other
//! by request id as picked legs do. The legs are the caller's: booked under its lease, they are its
//! reservations, whoever booked them before (ownership outlives a failover this way).
//!
//! A leg is checked against the view as a pick would be: its target must be live, serve its model
//! and take its kind (a prefill leg a prefill target, a decode leg a decode or mixed one), else
//! it is [`Declared::UnknownTarget`]; and a rank at its cap (`--max-requests-per-rank`) books no
//! more, [`Declared::OverCapacity`]. Either is declared again at the proxy's next renewal.

use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{DeclaredLeg, LeaseId, PickKind, ReservationId, Role};
use rand::Rng;

use super::{LoadChange, RoutingCore};
use crate::error::ControlError;
use crate::identity::Identity;
use crate::ledger::Booking;
use crate::target::TargetKey;

/// What became of one declared leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Declared {
    /// Booked under the new lease as this reservation.
    Booked {
        /// The reservation that now stands for the leg.
        reservation: ReservationId,
        /// Its leg.
        kind: PickKind,
        /// An earlier control had booked it (else it was a local fallback pick).
        was_booked: bool,
    },
    /// Not booked: this control's view has no such live target, or it does not serve the leg's
    /// model and kind.
    UnknownTarget,
    /// Not booked: the target's rank holds as many requests as its cap allows.
    OverCapacity,
}

/// The outcome of one `Redeclare`.
#[derive(Debug, Default)]
pub struct Redeclared {
    /// One per declared leg, in order.
    pub results: Vec<Declared>,
    /// The loads the bookings changed, for the gauges.
    pub changes: Vec<LoadChange>,
}

impl<R: Rng> RoutingCore<R> {
    /// Books `legs` under `caller`'s `lease` (which must be live), each as of its age before
    /// `now`.
    pub fn redeclare(
        &mut self,
        lease: LeaseId,
        caller: &Identity,
        legs: &[DeclaredLeg],
        now: Instant,
        wall: SystemTime,
    ) -> Result<Redeclared, ControlError> {
        self.ledger.check_lease(lease, caller, now)?;
        let mut out = Redeclared { results: Vec::with_capacity(legs.len()), changes: Vec::new() };
        for leg in legs {
            let Some(key) = self.declared_target(leg) else {
                out.results.push(Declared::UnknownTarget);
                continue;
            };
            if self.capacity.max_requests.is_some_and(|max| self.ledger.load(key).held_requests >= max) {
                out.results.push(Declared::OverCapacity);
                continue;
            }
            let booking = Booking {
                kind: leg.kind,
                target: key,
                request_id: leg.request_id.clone(),
                model: leg.model.clone(),
                input_tokens: leg.input_tokens,
                // An age beyond a day is a proxy's clock gone wrong, not a leg.
                age: leg.age.min(Duration::from_secs(86_400)),
                itl_limit_ms: None,
                awaiting_prefill: None,
            };
            let (reservation, load) = self.ledger.book(lease, caller, booking, now, wall)?;
            out.changes.push(self.change(key, load));
            out.results.push(Declared::Booked {
                reservation,
                kind: leg.kind,
                was_booked: leg.previous.is_some(),
            });
        }
        Ok(out)
    }

    /// The live target a leg names, if it serves the leg's model and kind.
    fn declared_target(&self, leg: &DeclaredLeg) -> Option<TargetKey> {
        let key = self.view.key(&leg.target)?;
        let slot = self.view.slot(key);
        let serves = match leg.kind {
            PickKind::Prefill => slot.worker.role == Role::Prefill,
            PickKind::Decode => matches!(slot.worker.role, Role::Decode | Role::Mixed),
        };
        (slot.live && serves && slot.worker.model == leg.model).then_some(key)
    }

    /// The holder of `lease`, while it is open.
    pub fn lease_holder(&self, lease: LeaseId) -> Option<String> {
        self.ledger.lease(lease).map(|l| l.holder.clone())
    }

    /// Whether `holder` holds a lease.
    pub fn holds_lease_of(&self, holder: &str) -> bool {
        self.ledger.has_lease_of(holder)
    }

    /// Takes the settings and drains persisted in etcd (read again at a takeover): a persisted
    /// pair that does not validate keeps the settings in force; the drained set becomes exactly
    /// `drains`.
    pub fn restore(
        &mut self,
        persisted: crate::persist::Persisted,
        drains: Vec<infera_proto::types::Target>,
    ) {
        if let Err(e) = self.update(persisted.settings) {
            tracing::warn!(error = %e, "persisted settings do not validate; keeping those in force");
        } else {
            self.weights.set_mode(persisted.weight_mode);
        }
        let live = self.view.live_targets();
        self.view.set_drained(&live, false);
        self.view.drain_by_name(drains);
    }

    /// Forgets every lease and reservation and starts a new ledger whose ids carry `epoch`: a
    /// control that takes over as leader (its proxies re-declare what they hold) or steps down
    /// (what it held is the new leader's now). Session affinity goes with it; the view, the
    /// settings and the fitted W stay.
    pub fn reset_ledger(&mut self, epoch: u32) {
        self.ledger = crate::ledger::Ledger::new(epoch, self.tags.clone());
        self.sessions = crate::affinity::Sessions::default();
    }
}

//! Every leg this proxy has in flight, with what control needs to book it again: its target,
//! kind, model, request id, booked tokens, start, and the booking that stands for it now (none
//! for a local fallback pick). When the lease changes (control restarted, another replica took
//! over) the legs not booked under the lease held now are re-declared
//! ([`super::redeclare`]); their answers replace the old bookings here, so each leg's later
//! release ends the reservation that stands for it, exactly once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use infera_proto::types::{DeclaredLeg, LeaseId, ModelName, PickKind, RequestId, ReservationId, Target};

/// What control booked for a leg: the registry keeps it per leg, and a leg's end
/// ([`super::release`]) releases it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Booking {
    /// The reservation to release.
    pub(super) reservation: ReservationId,
    /// The lease it was booked under.
    pub(super) lease: LeaseId,
}

/// A leg's number in the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct LegId(u64);

/// What a leg is, for re-declaring it.
#[derive(Clone, Debug)]
pub(super) struct LegFacts {
    pub(super) kind: PickKind,
    pub(super) target: Target,
    pub(super) model: ModelName,
    pub(super) request_id: RequestId,
    /// The tokens its booking charges (a prefill: those it computes).
    pub(super) input_tokens: u64,
}

#[derive(Debug)]
struct Leg {
    facts: LegFacts,
    started: Instant,
    booking: Option<Booking>,
}

/// A leg to re-declare, as it stood when the snapshot was taken.
#[derive(Debug, Clone)]
pub(super) struct Undeclared {
    pub(super) id: LegId,
    pub(super) leg: DeclaredLeg,
    pub(super) was: Option<Booking>,
}

/// The legs in flight.
#[derive(Debug, Default)]
pub(super) struct Legs {
    next: AtomicU64,
    legs: Mutex<HashMap<LegId, Leg>>,
}

impl Legs {
    /// A leg starts, booked as `booking` (`None`: a local pick).
    pub(super) fn start(&self, facts: LegFacts, booking: Option<Booking>) -> LegId {
        let id = LegId(self.next.fetch_add(1, Ordering::Relaxed));
        let leg = Leg { facts, started: Instant::now(), booking };
        self.legs.lock().expect("legs lock").insert(id, leg);
        id
    }

    /// A leg ends: the booking that stands for it now, if any.
    pub(super) fn end(&self, id: LegId) -> Option<Booking> {
        self.legs.lock().expect("legs lock").remove(&id).and_then(|l| l.booking)
    }

    /// The legs not booked under `lease`, at `now`.
    pub(super) fn undeclared(&self, lease: LeaseId, now: Instant) -> Vec<Undeclared> {
        let legs = self.legs.lock().expect("legs lock");
        legs.iter()
            .filter(|(_, l)| l.booking.is_none_or(|b| b.lease != lease))
            .map(|(id, l)| Undeclared {
                id: *id,
                leg: DeclaredLeg {
                    kind: l.facts.kind,
                    target: l.facts.target.clone(),
                    model: l.facts.model.clone(),
                    request_id: l.facts.request_id.clone(),
                    input_tokens: l.facts.input_tokens,
                    age: now.saturating_duration_since(l.started),
                    previous: l.booking.map(|b| b.reservation),
                },
                was: l.booking,
            })
            .collect()
    }

    /// Control booked `leg` as `reservation` under `lease`. `Err` hands the reservation back when
    /// the leg ended (or was booked anew) meanwhile: the caller releases it.
    pub(super) fn settle(
        &self,
        leg: &Undeclared,
        reservation: ReservationId,
        lease: LeaseId,
    ) -> Result<(), ReservationId> {
        let mut legs = self.legs.lock().expect("legs lock");
        match legs.get_mut(&leg.id) {
            Some(l) if l.booking == leg.was => {
                l.booking = Some(Booking { reservation, lease });
                Ok(())
            }
            _ => Err(reservation),
        }
    }

    /// Legs in flight.
    pub(super) fn len(&self) -> usize {
        self.legs.lock().expect("legs lock").len()
    }
}

#[cfg(test)]
mod tests {
    use infera_proto::types::{DpRank, WorkerId};

    use super::*;

    fn facts(kind: PickKind) -> LegFacts {
        LegFacts {
            kind,
            target: Target::new(WorkerId::new("d"), DpRank(1)),
            model: ModelName::new("m"),
            request_id: RequestId::new("r"),
            input_tokens: 10,
        }
    }

    #[test]
    fn legs_not_under_the_lease_are_declared_and_settled_once() {
        let (old, new) = (LeaseId { epoch: 1, seq: 1, tag: 7 }, LeaseId { epoch: 2, seq: 1, tag: 7 });
        let legs = Legs::default();
        let booked = Booking { reservation: ReservationId { epoch: 1, seq: 5, tag: 7 }, lease: old };
        let a = legs.start(facts(PickKind::Decode), Some(booked));
        let b = legs.start(facts(PickKind::Prefill), None);
        let current = legs.start(
            facts(PickKind::Decode),
            Some(Booking { reservation: ReservationId { epoch: 2, seq: 1, tag: 7 }, lease: new }),
        );
        let mut todo = legs.undeclared(new, Instant::now());
        todo.sort_by_key(|u| u.id.0);
        assert_eq!(todo.iter().map(|u| u.id).collect::<Vec<_>>(), [a, b]);
        assert_eq!(todo[0].leg.previous, Some(booked.reservation));
        assert_eq!(todo[1].leg.previous, None);
        // `b` ended while the call was out: its new reservation goes back to be released.
        assert_eq!(legs.end(b), None);
        assert_eq!(legs.settle(&todo[0], ReservationId { epoch: 2, seq: 2, tag: 7 }, new), Ok(()));
        assert_eq!(
            legs.settle(&todo[1], ReservationId { epoch: 2, seq: 3, tag: 7 }, new),
            Err(ReservationId { epoch: 2, seq: 3, tag: 7 })
        );
        assert!(legs.undeclared(new, Instant::now()).is_empty());
        // A snapshot that is stale (settled already) does not settle twice.
        assert!(legs.settle(&todo[0], ReservationId { epoch: 2, seq: 9, tag: 7 }, new).is_err());
        assert_eq!(
            legs.end(a),
            Some(Booking { reservation: ReservationId { epoch: 2, seq: 2, tag: 7 }, lease: new })
        );
        assert!(legs.end(current).is_some());
        assert_eq!(legs.len(), 0);
    }
}

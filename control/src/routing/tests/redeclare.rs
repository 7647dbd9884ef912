//! Legs re-declared under a new lease: booked as picks would have booked them, with their ages,
//! paired by request id, refused for unknown targets, and ended exactly once.

use infera_proto::types::{DeclaredLeg, Target};

use super::*;

fn leg(kind: PickKind, worker: &str, rank: u32, request: &str, tokens: u64, age_s: u64) -> DeclaredLeg {
    DeclaredLeg {
        kind,
        target: Target::new(WorkerId::new(worker), DpRank(rank)),
        model: ModelName::new("m"),
        request_id: RequestId::new(request),
        input_tokens: tokens,
        age: Duration::from_secs(age_s),
        previous: Some(ReservationId { epoch: 99, seq: 1, tag: 7 }),
    }
}

fn fixture() -> Fixture {
    let s = Settings {
        lease_ttl: Duration::from_secs(300),
        ..settings(DecodeInputDemand::On, 1e6, DecodePolicy::RoundRobin)
    };
    let mut f = Fixture::new(vec![worker("d", Role::Decode, "m", 2), worker("p", Role::Prefill, "m", 1)], s);
    f.now += Duration::from_secs(600);
    f.core.tick(f.now);
    f.lease =
        f.core.open_lease("proxy-a".into(), &Identity::anonymous(), Duration::ZERO, f.now).unwrap().lease;
    f
}

#[test]
fn declared_legs_are_booked_with_their_ages_and_pair_up_by_request() {
    let mut f = fixture();
    let legs = [
        leg(PickKind::Decode, "d", 1, "a", 900, 30),
        leg(PickKind::Prefill, "p", 0, "a", 900, 30),
        leg(PickKind::Decode, "d", 0, "b", 50, 5),
        leg(PickKind::Decode, "gone", 0, "c", 10, 1),
        leg(PickKind::Decode, "d", 7, "e", 10, 1),
    ];
    let out = f.core.redeclare(f.lease, &Identity::anonymous(), &legs, f.now, SystemTime::now()).unwrap();
    let booked: Vec<bool> = out.results.iter().map(|r| matches!(r, Declared::Booked { .. })).collect();
    assert_eq!(booked, [true, true, true, false, false], "unknown workers and ranks are not booked");
    assert_eq!(out.changes.len(), 3);
    let key = |f: &Fixture, w: &str, r| f.core.target_key(&Target::new(WorkerId::new(w), DpRank(r))).unwrap();
    let (d0, d1_key) = (key(&f, "d", 0), key(&f, "d", 1));
    let d1 = f.core.ledger.load(d1_key);
    assert_eq!((d1.held_requests, d1.booked_input_tokens), (1, 900));
    // `a`'s prefill is live: its decode counts as prefilling, as after two picks.
    assert_eq!(d1.prefilling.requests, 1);
    assert_eq!(f.core.ledger.load(d0).prefilling.requests, 0);
    let rows = f.core.reservations(Some(f.lease), None);
    let a = rows.iter().find(|r| r.reservation.request_id.as_str() == "a").unwrap();
    assert_eq!(f.now.duration_since(a.reservation.booked), Duration::from_secs(30), "booked as of its age");
    // The prefill ends now: one phase of 30 s, and the decode stops prefilling.
    let Declared::Booked { reservation, .. } = out.results[1] else { unreachable!() };
    f.release(reservation).unwrap().unwrap();
    assert_eq!(f.core.ledger.load(d1_key).prefilling.requests, 0);
    assert_eq!(f.core.ledger.phases().median(&ModelName::new("m")), Some(Duration::from_secs(30)));
    // Every booked leg ends exactly once.
    for r in &out.results {
        if let Declared::Booked { reservation, .. } = r {
            let _ = f.release(*reservation).unwrap();
            assert!(f.release(*reservation).unwrap().is_none(), "a second release changes nothing");
        }
    }
    assert_eq!(f.core.total_load(), Load::default());
}

#[test]
fn a_lease_that_is_not_live_books_nothing_and_a_reset_forgets_everything() {
    let mut f = fixture();
    let stale = LeaseId { epoch: 1, seq: 999, tag: 7 };
    let legs = [leg(PickKind::Decode, "d", 0, "a", 10, 0)];
    assert!(matches!(
        f.core.redeclare(stale, &Identity::anonymous(), &legs, f.now, SystemTime::now()),
        Err(ControlError::UnknownLease(_))
    ));
    assert_eq!(f.core.total_load(), Load::default());
    let out = f.core.redeclare(f.lease, &Identity::anonymous(), &legs, f.now, SystemTime::now()).unwrap();
    let Declared::Booked { reservation, was_booked: true, .. } = out.results[0] else { panic!("{out:?}") };
    assert_eq!(f.core.lease_holder(f.lease).as_deref(), Some("proxy-a"));
    assert!(f.core.holds_lease_of("proxy-a"));
    f.core.reset_ledger(42);
    assert_eq!(f.core.total_load(), Load::default());
    assert_eq!(f.core.lease_count(), 0);
    assert!(!f.core.holds_lease_of("proxy-a"));
    assert!(
        matches!(f.release(reservation), Err(ControlError::UnknownReservation(_))),
        "ids of the old term"
    );
    let lease =
        f.core.open_lease("proxy-a".into(), &Identity::anonymous(), Duration::ZERO, f.now).unwrap().lease;
    assert_eq!(lease.epoch, 42);
}

#[test]
fn carried_ejections_apply_now_or_when_their_target_registers() {
    use crate::ejection::{CarriedEjection, EjectionPolicy};
    let mut f = fixture();
    f.core.set_ejection(EjectionPolicy::default());
    let wall = SystemTime::now();
    let carried = |w: &str, left_s| CarriedEjection {
        target: Target::new(WorkerId::new(w), DpRank(0)),
        until: wall + Duration::from_secs(left_s),
        open: Duration::from_secs(60),
    };
    f.core.carry_ejections(vec![carried("d", 30), carried("late", 45)], f.now, wall);
    let d0 = f.core.target_key(&Target::new(WorkerId::new("d"), DpRank(0))).unwrap();
    assert_eq!(f.core.health(d0, f.now).state, "ejected");
    assert_eq!(f.core.health(d0, f.now).ejected_for, Duration::from_secs(30));
    // "late" registers afterwards: ejected from then on, for what was left.
    f.core.upsert_worker(worker("late", Role::Decode, "m", 1));
    let late = f.core.target_key(&Target::new(WorkerId::new("late"), DpRank(0))).unwrap();
    assert_eq!(f.core.health(late, Instant::now()).state, "ejected");
    let listed: Vec<String> = f.core.ejections(f.now, wall).iter().map(|e| e.target.to_string()).collect();
    assert_eq!(listed, ["d/0", "late/0"], "what the next leader would carry on");
}

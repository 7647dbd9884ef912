//! Leases and reservations belong to the identity that opened them; the bounds per identity; and
//! how much one identity's failure reports weigh in an ejection.

use infera_proto::types::{DeclaredLeg, LegFailure, Target};

use super::*;
use crate::ejection::EjectionPolicy;

fn id(name: &str) -> Identity {
    Identity::new(name).unwrap()
}

/// A decode worker `d` of 2 ranks and a prefill `p`, and one lease of `proxy-a`'s.
fn fixture() -> (Fixture, Identity) {
    let a = id("proxy-a");
    let mut f = Fixture::new(
        vec![worker("d", Role::Decode, "m", 2), worker("p", Role::Prefill, "m", 1)],
        settings(DecodeInputDemand::On, 1e6, DecodePolicy::RoundRobin),
    );
    f.lease = f.core.open_lease("a".into(), &a, Duration::from_secs(300), f.now).unwrap().lease;
    (f, a)
}

fn pick_as(f: &mut Fixture, who: &Identity, kind: PickKind) -> Result<Picked, ControlError> {
    let req = f.req("m", 100, None);
    let ctx = PickContext {
        caller: who,
        kv: None,
        record_decision: false,
        now: f.now,
        wall: SystemTime::now(),
        kv_room: None,
    };
    f.core.pick(kind, &req, ctx)
}

#[test]
fn another_identity_cannot_book_under_renew_close_or_release_a_lease_it_does_not_own() {
    let (mut f, a) = fixture();
    let b = id("proxy-b");
    let booked = pick_as(&mut f, &a, PickKind::Decode).unwrap();
    let before = (f.core.total_load(), f.core.reservations(None, None).len());
    assert!(matches!(pick_as(&mut f, &b, PickKind::Decode), Err(ControlError::ForeignLease(_))));
    assert!(matches!(f.core.keep_alive(f.lease, &b, f.now), Err(ControlError::ForeignLease(_))));
    assert!(matches!(f.core.close_lease(f.lease, &b, f.now), Err(ControlError::ForeignLease(_))));
    let failed =
        Release { id: booked.reservation, reason: ReleaseReason::Failed, failure: Some(LegFailure::Connect) };
    let release = f.core.release(failed, &b, f.now);
    assert!(matches!(release, Err(ControlError::ForeignReservation(_))));
    let legs = [DeclaredLeg {
        kind: PickKind::Decode,
        target: Target::new(WorkerId::new("d"), DpRank(0)),
        model: ModelName::new("m"),
        request_id: RequestId::new("x"),
        input_tokens: 5,
        age: Duration::ZERO,
        previous: None,
    }];
    assert!(matches!(
        f.core.redeclare(f.lease, &b, &legs, f.now, SystemTime::now()),
        Err(ControlError::ForeignLease(_))
    ));
    assert_eq!((f.core.total_load(), f.core.reservations(None, None).len()), before, "nothing changed");
    assert_eq!(f.core.health(f.core.target_key(&booked.chosen.target).unwrap(), f.now).failures, 0);
    // The owner's lease and reservation are as they were.
    f.core.keep_alive(f.lease, &a, f.now).unwrap();
    let eof = Release::new(booked.reservation, ReleaseReason::Eof);
    assert!(f.core.release(eof, &a, f.now).unwrap().is_some());
    let rows = f.core.reservations(None, None);
    assert!(rows.is_empty());
}

#[test]
fn the_reservations_list_names_each_owner() {
    let (mut f, a) = fixture();
    let b = id("proxy-b");
    let lease_b = f.core.open_lease("b".into(), &b, Duration::ZERO, f.now).unwrap().lease;
    pick_as(&mut f, &a, PickKind::Decode).unwrap();
    f.lease = lease_b;
    pick_as(&mut f, &b, PickKind::Decode).unwrap();
    let owners: Vec<String> =
        f.core.reservations(None, None).iter().map(|r| r.owner.as_ref().unwrap().to_string()).collect();
    assert_eq!(owners, ["proxy-a", "proxy-b"]);
}

#[test]
fn an_identity_holds_at_most_its_bound_of_leases() {
    let (mut f, a) = fixture();
    let others = f.core.lease_count() - 1;
    f.core.set_bounds(crate::bounds::Bounds { leases_per_identity: 2, ..Default::default() });
    let second = f.core.open_lease("a".into(), &a, Duration::ZERO, f.now).unwrap().lease;
    let refused = f.core.open_lease("a".into(), &a, Duration::ZERO, f.now);
    assert!(matches!(refused, Err(ControlError::TooManyLeases { max: 2, .. })));
    assert_eq!(refused.unwrap_err().reason(), infera_proto::error::ErrorReason::TooManyLeases);
    // Another identity has bounds of its own; a closed lease makes room.
    f.core.open_lease("b".into(), &id("proxy-b"), Duration::ZERO, f.now).unwrap();
    f.core.close_lease(second, &a, f.now).unwrap();
    f.core.open_lease("a".into(), &a, Duration::ZERO, f.now).unwrap();
    assert_eq!(f.core.lease_count(), others + 3);
}

fn declared(kind: PickKind, worker: &str, model: &str, request: &str) -> DeclaredLeg {
    DeclaredLeg {
        kind,
        target: Target::new(WorkerId::new(worker), DpRank(0)),
        model: ModelName::new(model),
        request_id: RequestId::new(request),
        input_tokens: 10,
        age: Duration::ZERO,
        previous: None,
    }
}

#[test]
fn a_declared_leg_must_match_its_targets_model_and_role_and_fit_under_the_rank_cap() {
    let (mut f, a) = fixture();
    f.core.set_capacity(Capacity { max_requests: Some(2), max_kv_usage: None });
    let legs = [
        declared(PickKind::Decode, "d", "other-model", "wrong-model"),
        declared(PickKind::Prefill, "d", "m", "prefill-on-a-decode"),
        declared(PickKind::Decode, "p", "m", "decode-on-a-prefill"),
        declared(PickKind::Decode, "d", "m", "one"),
        declared(PickKind::Decode, "d", "m", "two"),
        declared(PickKind::Decode, "d", "m", "three"),
        declared(PickKind::Prefill, "p", "m", "one"),
    ];
    let out = f.core.redeclare(f.lease, &a, &legs, f.now, SystemTime::now()).unwrap();
    let what: Vec<&str> = out
        .results
        .iter()
        .map(|r| match r {
            Declared::Booked { .. } => "booked",
            Declared::UnknownTarget => "unknown",
            Declared::OverCapacity => "full",
        })
        .collect();
    assert_eq!(what, ["unknown", "unknown", "unknown", "booked", "booked", "full", "booked"]);
    let d0 = f.core.target_key(&Target::new(WorkerId::new("d"), DpRank(0))).unwrap();
    assert_eq!(f.core.ledger.load(d0).held_requests, 2, "the cap holds");
}

/// Ejection after 3 failures in a row, witnessed for 10 s.
fn ejecting(f: &mut Fixture) {
    f.core.set_ejection(EjectionPolicy {
        failures: 3,
        witness_window: Duration::from_secs(10),
        ..EjectionPolicy::default()
    });
}

/// `who` books a decode on `d` under `lease` and ends it with `failure` (`None`: its EOF).
fn leg_on_d(f: &mut Fixture, who: &Identity, lease: LeaseId, failure: Option<LegFailure>) -> ReleasedNow {
    f.lease = lease;
    let p = pick_as(f, who, PickKind::Decode).unwrap();
    let reason = if failure.is_some() { ReleaseReason::Failed } else { ReleaseReason::Eof };
    f.core.release(Release { id: p.reservation, reason, failure }, who, f.now).unwrap().unwrap()
}

fn ejected(f: &Fixture) -> Vec<&'static str> {
    ["d"]
        .iter()
        .flat_map(|w| (0..2).map(move |r| Target::new(WorkerId::new(*w), DpRank(r))))
        .map(|t| f.core.health(f.core.target_key(&t).unwrap(), f.now).state)
        .collect()
}

#[test]
fn one_identitys_forged_failures_do_not_eject_a_worker_another_identity_uses() {
    let (mut f, a) = fixture();
    ejecting(&mut f);
    let x = id("attacker");
    let (lease_a, lease_x) =
        (f.lease, f.core.open_lease("x".into(), &x, Duration::from_secs(300), f.now).unwrap().lease);
    // proxy-a serves from both ranks of d.
    leg_on_d(&mut f, &a, lease_a, None);
    leg_on_d(&mut f, &a, lease_a, None);
    // x books and reports refused connections, many times over: each is discounted.
    let mut discounted = 0;
    for _ in 0..10 {
        discounted += leg_on_d(&mut f, &x, lease_x, Some(LegFailure::Connect)).discounted;
    }
    assert_eq!(ejected(&f), ["healthy", "healthy"]);
    assert_eq!(
        discounted, 20,
        "each refused connection counts against both ranks, and is discounted on both"
    );
    // Once a's success is older than the window, x's reports count (the documented trade-off).
    f.now += Duration::from_secs(10);
    for _ in 0..3 {
        leg_on_d(&mut f, &x, lease_x, Some(LegFailure::Connect));
    }
    assert_eq!(ejected(&f), ["ejected", "ejected"]);
}

#[test]
fn a_worker_that_really_fails_is_ejected_once_every_identity_that_used_it_sees_a_failure() {
    let (mut f, a) = fixture();
    ejecting(&mut f);
    let b = id("proxy-b");
    let (lease_a, lease_b) =
        (f.lease, f.core.open_lease("b".into(), &b, Duration::from_secs(300), f.now).unwrap().lease);
    leg_on_d(&mut f, &a, lease_a, None);
    leg_on_d(&mut f, &b, lease_b, None);
    leg_on_d(&mut f, &b, lease_b, None);
    // d stops accepting: a's first report is discounted (b witnessed d), b's is not, and from then
    // on nobody witnesses d.
    assert_eq!(leg_on_d(&mut f, &a, lease_a, Some(LegFailure::Connect)).discounted, 2);
    assert_eq!(leg_on_d(&mut f, &b, lease_b, Some(LegFailure::Connect)).discounted, 0);
    leg_on_d(&mut f, &a, lease_a, Some(LegFailure::Connect));
    assert_eq!(ejected(&f), ["healthy", "healthy"]);
    leg_on_d(&mut f, &b, lease_b, Some(LegFailure::Connect));
    assert_eq!(ejected(&f), ["ejected", "ejected"], "three reports that count, in a row");
}

#[test]
fn a_single_proxy_ejects_a_dead_worker_as_before() {
    let (mut f, a) = fixture();
    ejecting(&mut f);
    let lease = f.lease;
    leg_on_d(&mut f, &a, lease, None);
    for _ in 0..3 {
        assert_eq!(leg_on_d(&mut f, &a, lease, Some(LegFailure::Connect)).discounted, 0);
    }
    assert_eq!(ejected(&f), ["ejected", "ejected"]);
}

//! The breaker's transitions, driven with a clock of our own.

use std::time::{Duration, Instant};

use infera_proto::types::LegFailure;
use proptest::prelude::*;

use super::*;

const FAIL: Outcome = Outcome::Failure(Failure::Leg(LegFailure::Connect));

fn policy() -> EjectionPolicy {
    EjectionPolicy {
        failures: 3,
        open: Duration::from_secs(10),
        max_open: Duration::from_secs(25),
        successes: 2,
        witness_window: Duration::from_secs(30),
    }
}

/// Breakers whose `key` failed 3 times in a row at `t0`: ejected for 10 s.
fn ejected(key: TargetKey, t0: Instant) -> Breakers {
    let mut b = Breakers::new(policy());
    for _ in 0..3 {
        b.observe(key, FAIL, t0);
    }
    b
}

#[test]
fn failures_in_a_row_eject_and_a_success_between_them_resets_the_count() {
    let (t0, key) = (Instant::now(), TargetKey::from_index(4));
    let mut b = Breakers::new(policy());
    assert_eq!(b.admits(key, t0), Admit::Yes);
    b.observe(key, FAIL, t0);
    b.observe(key, FAIL, t0);
    b.observe(key, Outcome::Success, t0);
    b.observe(key, FAIL, t0);
    assert_eq!(b.observe(key, FAIL, t0), None, "two in a row since the success");
    assert_eq!(b.health(key, t0).failures, 2);
    let ejected = b.observe(key, FAIL, t0);
    assert!(
        matches!(ejected, Some(Transition::Ejected { open, reprobed: false, .. }) if open == Duration::from_secs(10))
    );
    assert_eq!(b.admits(key, t0 + Duration::from_secs(9)), Admit::No);
    let h = b.health(key, t0 + Duration::from_secs(4));
    assert_eq!((h.state, h.ejected_for), ("ejected", Duration::from_secs(6)));
    // Cancellations and the other leg's failures say nothing.
    assert_eq!(b.observe(key, Outcome::Neutral, t0), None);
    assert_eq!(b.admits(TargetKey::from_index(0), t0), Admit::Yes, "other targets are untouched");
}

#[test]
fn an_ejection_read_out_and_carried_on_keeps_its_time_and_its_doubling() {
    let (t0, key) = (Instant::now(), TargetKey::from_index(2));
    let old = ejected(key, t0);
    let open = Duration::from_secs(10);
    let later = t0 + Duration::from_secs(4);
    assert_eq!(old.ejections(later), vec![(key, Ejection { until: t0 + open, open })]);
    assert_eq!(
        old.ejections(t0 + Duration::from_secs(11)),
        vec![(key, Ejection { until: t0 + Duration::from_secs(11), open })],
        "past its time (probing next): due now"
    );
    // The next leader, whose clock is its own: 6 s left of it.
    let (t1, mut new) = (Instant::now() + Duration::from_secs(100), Breakers::new(policy()));
    let carried = Ejection { until: t1 + Duration::from_secs(6), open };
    new.carry(key, carried);
    assert_eq!(new.admits(key, t1 + Duration::from_secs(5)), Admit::No);
    assert_eq!(new.admits(key, t1 + Duration::from_secs(6)), Admit::Probe);
    new.picked(key, t1 + Duration::from_secs(6));
    let again = new.observe(key, FAIL, t1 + Duration::from_secs(6));
    assert!(
        matches!(again, Some(Transition::Ejected { open, reprobed: true, .. }) if open == Duration::from_secs(20))
    );
    // Probing is carried as due now; ejection off carries nothing.
    let mut off = Breakers::new(EjectionPolicy { failures: 0, ..policy() });
    off.carry(key, carried);
    assert!(off.ejections(t1).is_empty());
    assert!(Breakers::new(policy()).ejections(t1).is_empty(), "a healthy target is not carried");
}

#[test]
fn half_open_lets_one_probe_through_and_closes_after_enough_successes() {
    let (t0, key) = (Instant::now(), TargetKey::from_index(0));
    let mut b = ejected(key, t0);
    let t1 = t0 + Duration::from_secs(10);
    assert_eq!(b.admits(key, t1), Admit::Probe);
    assert_eq!(b.health(key, t1).state, "probing");
    b.picked(key, t1);
    assert_eq!(b.admits(key, t1), Admit::No, "one probe at a time");
    assert_eq!(b.observe(key, Outcome::Success, t1), None);
    assert_eq!(b.admits(key, t1), Admit::Probe, "the next probe");
    b.picked(key, t1);
    // A cancelled probe lets another through without a verdict.
    b.observe(key, Outcome::Neutral, t1);
    assert_eq!(b.admits(key, t1), Admit::Probe);
    b.picked(key, t1);
    assert_eq!(b.observe(key, Outcome::Success, t1), Some(Transition::Readmitted));
    assert_eq!(b.admits(key, t1), Admit::Yes);
    assert_eq!(b.health(key, t1), Health { state: "healthy", failures: 0, ejected_for: Duration::ZERO });
}

#[test]
fn a_failed_probe_ejects_again_for_twice_as_long_up_to_the_cap() {
    let (t0, key) = (Instant::now(), TargetKey::from_index(0));
    let mut b = ejected(key, t0);
    let mut now = t0 + Duration::from_secs(10);
    for expected in [20, 25, 25] {
        assert_eq!(b.admits(key, now), Admit::Probe);
        b.picked(key, now);
        let t = b.observe(key, FAIL, now);
        assert!(
            matches!(t, Some(Transition::Ejected { open, reprobed: true, .. }) if open == Duration::from_secs(expected)),
            "{t:?}"
        );
        assert_eq!(b.admits(key, now + Duration::from_secs(expected) - Duration::from_millis(1)), Admit::No);
        now += Duration::from_secs(expected);
    }
}

#[test]
fn ejection_off_admits_everything() {
    let t0 = Instant::now();
    let mut b = Breakers::new(EjectionPolicy { failures: 0, ..policy() });
    for _ in 0..100 {
        assert_eq!(b.observe(TargetKey::from_index(0), FAIL, t0), None);
    }
    assert_eq!(b.admits(TargetKey::from_index(0), t0), Admit::Yes);
}

proptest! {
    /// Whatever the outcomes and their timing, a breaker admits at most one probe at a time while
    /// half-open, never admits while ejected, and its health agrees with what it admits.
    #[test]
    fn admission_agrees_with_health(steps in proptest::collection::vec((0u8..4, 0u64..30_000), 1..200)) {
        let (mut now, key) = (Instant::now(), TargetKey::from_index(0));
        let mut b = Breakers::new(policy());
        for (op, dt) in steps {
            now += Duration::from_millis(dt);
            let admit = b.admits(key, now);
            match b.health(key, now).state {
                "healthy" => prop_assert_eq!(admit, Admit::Yes),
                "ejected" => prop_assert_eq!(admit, Admit::No),
                _ => prop_assert!(admit != Admit::Yes),
            }
            match op {
                0 if admit != Admit::No => b.picked(key, now),
                1 => { b.observe(key, Outcome::Success, now); }
                2 => { b.observe(key, FAIL, now); }
                _ => { b.observe(key, Outcome::Neutral, now); }
            }
            if admit == Admit::Probe && op == 0 {
                prop_assert_eq!(b.admits(key, now), Admit::No, "one probe at a time");
            }
        }
    }
}

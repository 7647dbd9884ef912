//! Ledger invariants over random interleavings of leases, bookings, releases and expiry.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{LeaseId, ModelName, PickKind, ReleaseReason, RequestId, ReservationId};
use proptest::prelude::*;

use super::*;
use crate::target::TargetKey;

/// The identity every lease of these tests belongs to.
fn who() -> Identity {
    Identity::new("proxy-a").unwrap()
}

const TARGETS: u32 = 6;

#[derive(Clone, Debug)]
enum Op {
    OpenLease { ttl_ms: u64 },
    Book { lease: usize, target: u32, tokens: u64, prefill: bool, request: u8 },
    Release { reservation: usize, reason: usize },
    KeepAlive { lease: usize },
    CloseLease { lease: usize },
    Advance { ms: u64 },
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (50u64..2_000).prop_map(|ttl_ms| Op::OpenLease { ttl_ms }),
        6 => (any::<usize>(), 0..TARGETS, 0u64..200_000, any::<bool>(), 0u8..6)
            .prop_map(|(lease, target, tokens, prefill, request)| Op::Book { lease, target, tokens, prefill, request }),
        5 => (any::<usize>(), any::<usize>()).prop_map(|(reservation, reason)| Op::Release { reservation, reason }),
        2 => any::<usize>().prop_map(|lease| Op::KeepAlive { lease }),
        1 => any::<usize>().prop_map(|lease| Op::CloseLease { lease }),
        2 => (0u64..500).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Expire),
    ]
}

fn booking(target: u32, tokens: u64) -> Booking {
    leg(PickKind::Decode, target, tokens, "req")
}

fn leg(kind: PickKind, target: u32, tokens: u64, request: &str) -> Booking {
    Booking {
        kind,
        target: TargetKey::from_index(target),
        request_id: RequestId::new(request),
        model: ModelName::new("m"),
        input_tokens: tokens,
        age: Duration::ZERO,
        itl_limit_ms: None,
        awaiting_prefill: None,
    }
}

/// The loads implied by the live reservations, recomputed from scratch.
fn recomputed(ledger: &Ledger) -> HashMap<u32, Load> {
    let mut loads: HashMap<u32, Load> = HashMap::new();
    for r in ledger.reservations() {
        let l = loads.entry(r.target.index() as u32).or_default();
        l.booked_input_tokens += r.input_tokens;
        l.held_requests += 1;
        if r.prefilling {
            l.prefilling.requests += 1;
            l.prefilling.tokens += r.input_tokens;
        }
    }
    loads
}

/// A decode marked as prefilling always has a live prefill of the same request.
fn check_prefilling_sound(ledger: &Ledger) {
    let live = ledger.reservations();
    for r in live.iter().filter(|r| r.prefilling) {
        assert_eq!(r.kind, PickKind::Decode, "{r:?}");
        assert!(
            live.iter().any(|p| p.kind == PickKind::Prefill && p.request_id == r.request_id),
            "{r:?} is marked prefilling without a live prefill"
        );
    }
}

/// Only a live decode awaits a prefill, and each target's sum is its entries'.
fn check_awaiting_sound(ledger: &Ledger) {
    let entries = &ledger.awaiting.by_decode;
    for seq in entries.keys() {
        let r = ledger.reservations.get(seq).expect("an awaiting decode is live");
        assert_eq!(r.kind, PickKind::Decode, "{r:?}");
    }
    for t in 0..TARGETS {
        let key = TargetKey::from_index(t);
        let sum: u64 = entries.values().filter(|p| p.target == key).map(|p| p.tokens).sum();
        assert_eq!(ledger.awaiting_prefill_on(key), sum, "target {t}");
    }
}

fn check_consistent(ledger: &Ledger) {
    let expected = recomputed(ledger);
    for t in 0..TARGETS {
        let key = TargetKey::from_index(t);
        let got = ledger.load(key);
        assert_eq!(got, expected.get(&t).copied().unwrap_or_default(), "target {t}");
        // The per-target index a pick weighs by age is exactly the aggregate's reservations.
        let (mut requests, mut tokens) = (0, 0);
        for e in ledger.prefilling_on(key) {
            requests += 1;
            tokens += e.tokens;
        }
        assert_eq!(Prefilling { requests, tokens }, got.prefilling, "target {t}'s prefilling index");
    }
}

/// Release reasons, indexed by the proptest.
const REASONS: [ReleaseReason; 5] = ReleaseReason::ALL;

fn phase_samples(ledger: &Ledger) -> usize {
    ledger.phases().window(&ModelName::new("m")).map_or(0, |w| w.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn loads_always_equal_live_reservations_and_end_at_zero(ops in prop::collection::vec(op(), 1..200)) {
        let base = Instant::now();
        let mut now = base;
        let mut ledger = Ledger::new(7, IdTags::fixed([7; 32]));
        let mut leases = Vec::new();
        let mut issued: Vec<ReservationId> = Vec::new();
        let mut ended: std::collections::HashSet<ReservationId> = Default::default();
        let mut eof_prefills = 0;

        for op in ops {
            match op {
                Op::OpenLease { ttl_ms } => leases.push(ledger.open_lease("p".into(), who(), Duration::from_millis(ttl_ms), now)),
                Op::Book { lease, target, tokens, prefill, request } if !leases.is_empty() => {
                    let lease = leases[lease % leases.len()];
                    let live = ledger.lease(lease).is_some_and(|s| s.expires_at > now);
                    let kind = if prefill { PickKind::Prefill } else { PickKind::Decode };
                    let mut booking = leg(kind, target, tokens, &format!("req-{request}"));
                    if kind == PickKind::Decode {
                        // Every decode foresees its prefill; only one booked first awaits it.
                        let target = TargetKey::from_index((target + 1) % TARGETS);
                        booking.awaiting_prefill = Some(AwaitingPrefill { target, tokens: tokens / 2 });
                    }
                    match ledger.book(lease, &who(), booking, now, SystemTime::UNIX_EPOCH) {
                        Ok((id, _)) => { prop_assert!(live); issued.push(id); }
                        Err(ControlError::UnknownLease(_)) => prop_assert!(!live),
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Release { reservation, reason } if !issued.is_empty() => {
                    let id = issued[reservation % issued.len()];
                    let reason = REASONS[reason % REASONS.len()];
                    let before = ledger.total();
                    match ledger.release(id, &who(), reason, now).unwrap() {
                        Released::Now(r, _) => {
                            prop_assert!(ended.insert(id), "released twice: {id}");
                            if r.kind == PickKind::Prefill && reason == ReleaseReason::Eof {
                                eof_prefills += 1;
                            }
                            prop_assert_eq!(ledger.total().held_requests + 1, before.held_requests);
                            prop_assert_eq!(ledger.total().booked_input_tokens + r.input_tokens, before.booked_input_tokens);
                        }
                        Released::Already => {
                            prop_assert!(ended.contains(&id));
                            prop_assert_eq!(ledger.total(), before);
                        }
                    }
                }
                Op::KeepAlive { lease } if !leases.is_empty() => {
                    let _ = ledger.keep_alive(leases[lease % leases.len()], &who(), now);
                }
                Op::CloseLease { lease } if !leases.is_empty() => {
                    if let Ok(released) = ledger.close_lease(leases[lease % leases.len()], &who(), now) {
                        for (r, _) in released { prop_assert!(ended.insert(r.id)); }
                    }
                }
                Op::Advance { ms } => now += Duration::from_millis(ms),
                Op::Expire => {
                    for e in ledger.expire(now) {
                        for (r, _) in e.released { prop_assert!(ended.insert(r.id)); }
                    }
                }
                _ => {}
            }
            check_consistent(&ledger);
            check_prefilling_sound(&ledger);
            check_awaiting_sound(&ledger);
            // Samples come from prefills released at their EOF only (never from expiries).
            prop_assert_eq!(phase_samples(&ledger), eof_prefills.min(crate::prefill_phase::PHASE_WINDOW));
        }

        // Every lease ends (as a dead proxy's would): everything must be back to exactly zero.
        for e in ledger.expire(now + Duration::from_secs(3600)) {
            for (r, _) in e.released { prop_assert!(ended.insert(r.id)); }
        }
        prop_assert_eq!(ledger.total(), Load::default());
        prop_assert!(ledger.reservations().is_empty());
        prop_assert_eq!(ledger.awaiting_prefills(), 0);
        for t in 0..TARGETS {
            prop_assert_eq!(ledger.awaiting_prefill_on(TargetKey::from_index(t)), 0);
        }
        prop_assert_eq!(ended.len(), issued.len());
        for id in issued {
            prop_assert_eq!(ledger.release(id, &who(), ReleaseReason::Eof, now).unwrap(), Released::Already);
        }
        prop_assert_eq!(phase_samples(&ledger), eof_prefills.min(crate::prefill_phase::PHASE_WINDOW));
    }
}

#[test]
fn unknown_ids_are_not_found_and_change_nothing() {
    let now = Instant::now();
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("p".into(), who(), Duration::from_secs(10), now);
    let (id, _) = ledger.book(lease, &who(), booking(0, 100), now, SystemTime::UNIX_EPOCH).unwrap();
    let never = ReservationId { epoch: 1, seq: id.seq + 1, tag: id.tag };
    let other_epoch = ReservationId { epoch: 2, seq: id.seq, tag: id.tag };
    let wrong_tag = ReservationId { tag: id.tag ^ 1, ..id };
    let untagged = ReservationId { tag: 0, ..id };
    for bad in [wrong_tag, untagged] {
        assert!(matches!(
            ledger.release(bad, &who(), ReleaseReason::Eof, now),
            Err(ControlError::UnknownReservation(_))
        ));
    }
    assert!(matches!(
        ledger.release(never, &who(), ReleaseReason::Eof, now),
        Err(ControlError::UnknownReservation(_))
    ));
    assert!(matches!(
        ledger.release(other_epoch, &who(), ReleaseReason::Eof, now),
        Err(ControlError::UnknownReservation(_))
    ));
    assert_eq!(ledger.total(), Load { booked_input_tokens: 100, held_requests: 1, ..Load::default() });
}

#[test]
fn expired_leases_cannot_book_or_renew() {
    let now = Instant::now();
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("p".into(), who(), Duration::from_millis(100), now);
    let later = now + Duration::from_millis(100);
    assert!(ledger.keep_alive(lease, &who(), later).is_err());
    assert!(ledger.book(lease, &who(), booking(0, 1), later, SystemTime::UNIX_EPOCH).is_err());
}

#[test]
fn keep_alive_extends_the_deadline() {
    let now = Instant::now();
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("p".into(), who(), Duration::from_millis(100), now);
    ledger.book(lease, &who(), booking(2, 5), now, SystemTime::UNIX_EPOCH).unwrap();
    ledger.keep_alive(lease, &who(), now + Duration::from_millis(90)).unwrap();
    assert!(ledger.expire(now + Duration::from_millis(150)).is_empty());
    let expired = ledger.expire(now + Duration::from_millis(190));
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].released.len(), 1);
    assert_eq!(ledger.total(), Load::default());
}

#[test]
fn a_decode_is_prefilling_while_its_requests_prefill_is_live_in_either_booking_order() {
    let now = Instant::now();
    let wall = SystemTime::UNIX_EPOCH;
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("p".into(), who(), Duration::from_secs(60), now);
    let d = TargetKey::from_index(1);
    // Decode first, then its prefill (the proxy picks both at once).
    let (d1, _) = ledger.book(lease, &who(), leg(PickKind::Decode, 1, 100, "a"), now, wall).unwrap();
    assert_eq!(
        ledger.load(d).prefilling,
        Prefilling::default(),
        "no prefill yet: an aggregated request decodes at once"
    );
    let (p1, _) = ledger.book(lease, &who(), leg(PickKind::Prefill, 0, 100, "a"), now, wall).unwrap();
    assert_eq!(ledger.load(d).prefilling, Prefilling { requests: 1, tokens: 100 });
    // Prefill first, then its decode.
    let (p2, _) = ledger.book(lease, &who(), leg(PickKind::Prefill, 0, 40, "b"), now, wall).unwrap();
    let (d2, load) = ledger.book(lease, &who(), leg(PickKind::Decode, 1, 40, "b"), now, wall).unwrap();
    assert_eq!(load.prefilling, Prefilling { requests: 2, tokens: 140 });
    assert_eq!(load.held_requests, 2);
    // A's prefill ends (its KV is on its way): A decodes.
    ledger.release(p1, &who(), ReleaseReason::Eof, now).unwrap();
    assert_eq!(ledger.load(d).prefilling, Prefilling { requests: 1, tokens: 40 });
    // B's decode ends (cancelled) while B still prefills.
    ledger.release(d2, &who(), ReleaseReason::Eof, now).unwrap();
    assert_eq!(ledger.load(d).prefilling, Prefilling::default());
    ledger.release(p2, &who(), ReleaseReason::Eof, now).unwrap();
    ledger.release(d1, &who(), ReleaseReason::Eof, now).unwrap();
    assert_eq!(ledger.total(), Load::default());
}

#[test]
fn a_decode_booked_before_its_prefill_awaits_it_on_the_foreseen_target() {
    let now = Instant::now();
    let wall = SystemTime::UNIX_EPOCH;
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("p".into(), who(), Duration::from_secs(60), now);
    let p = TargetKey::from_index(0);
    let foreseen = |tokens| Some(AwaitingPrefill { target: p, tokens });
    let decode = |tokens, request| Booking {
        awaiting_prefill: foreseen(tokens),
        ..leg(PickKind::Decode, 1, 100, request)
    };
    // Two decodes admitted before their prefills: 60 + 30 tokens are on their way to p.
    let (da, _) = ledger.book(lease, &who(), decode(60, "a"), now, wall).unwrap();
    let (db, _) = ledger.book(lease, &who(), decode(30, "b"), now, wall).unwrap();
    assert_eq!((ledger.awaiting_prefill_on(p), ledger.awaiting_prefills()), (90, 2));
    // A's prefill is booked (anywhere): its queue holds it now, not the forecast.
    let (pa, _) = ledger.book(lease, &who(), leg(PickKind::Prefill, 2, 60, "a"), now, wall).unwrap();
    assert_eq!((ledger.awaiting_prefill_on(p), ledger.awaiting_prefills()), (30, 1));
    // B's decode is cancelled before its prefill pick: nothing is awaited any more.
    ledger.release(db, &who(), ReleaseReason::Cancelled, now).unwrap();
    assert_eq!((ledger.awaiting_prefill_on(p), ledger.awaiting_prefills()), (0, 0));
    // A decode booked after its prefill awaits nothing.
    let (pc, _) = ledger.book(lease, &who(), leg(PickKind::Prefill, 0, 50, "c"), now, wall).unwrap();
    let (dc, _) = ledger.book(lease, &who(), decode(50, "c"), now, wall).unwrap();
    assert_eq!(ledger.awaiting_prefill_on(p), 0);
    // A lease's expiry ends what it awaited with its decodes.
    ledger.book(lease, &who(), decode(70, "d"), now, wall).unwrap();
    assert_eq!(ledger.awaiting_prefill_on(p), 70);
    ledger.expire(now + Duration::from_secs(61));
    assert_eq!((ledger.awaiting_prefill_on(p), ledger.awaiting_prefills()), (0, 0));
    for id in [da, pa, pc, dc] {
        assert_eq!(ledger.release(id, &who(), ReleaseReason::Eof, now).unwrap(), Released::Already);
    }
}

#[test]
fn a_lease_expiry_ends_the_prefill_phase_with_the_prefill() {
    let now = Instant::now();
    let wall = SystemTime::UNIX_EPOCH;
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let decode_lease = ledger.open_lease("p1".into(), who(), Duration::from_secs(60), now);
    let prefill_lease = ledger.open_lease("p2".into(), who(), Duration::from_millis(100), now);
    ledger.book(decode_lease, &who(), leg(PickKind::Decode, 1, 10, "a"), now, wall).unwrap();
    ledger.book(prefill_lease, &who(), leg(PickKind::Prefill, 0, 10, "a"), now, wall).unwrap();
    assert_eq!(ledger.load(TargetKey::from_index(1)).prefilling.requests, 1);
    ledger.expire(now + Duration::from_secs(1));
    assert_eq!(ledger.load(TargetKey::from_index(1)).prefilling, Prefilling::default());
    assert_eq!(ledger.load(TargetKey::from_index(1)).held_requests, 1);
}

#[test]
fn phase_samples_are_the_eof_prefill_releases_booking_to_end() {
    let t0 = Instant::now();
    let wall = SystemTime::UNIX_EPOCH;
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("p".into(), who(), Duration::from_secs(600), t0);
    let other = ledger.open_lease("q".into(), who(), Duration::from_secs(1), t0);
    let book = |ledger: &mut Ledger, lease, kind, request: &str| {
        ledger.book(lease, &who(), leg(kind, 0, 10, request), t0, wall).unwrap().0
    };
    let eof = book(&mut ledger, lease, PickKind::Prefill, "a");
    let cancelled = book(&mut ledger, lease, PickKind::Prefill, "b");
    let failed = book(&mut ledger, lease, PickKind::Prefill, "c");
    let decode = book(&mut ledger, lease, PickKind::Decode, "a");
    let expires = book(&mut ledger, other, PickKind::Prefill, "d");
    let m = ModelName::new("m");
    assert_eq!(ledger.phases().median(&m), None, "nothing completed yet");

    ledger.release(cancelled, &who(), ReleaseReason::Cancelled, t0 + Duration::from_secs(1)).unwrap();
    ledger.release(failed, &who(), ReleaseReason::Failed, t0 + Duration::from_secs(2)).unwrap();
    ledger.release(decode, &who(), ReleaseReason::Eof, t0 + Duration::from_secs(3)).unwrap();
    ledger.expire(t0 + Duration::from_secs(4));
    assert_eq!(
        ledger.phases().median(&m),
        None,
        "a cancel, a failure, a decode's EOF and an expiry are no phases"
    );
    assert!(matches!(
        ledger.release(expires, &who(), ReleaseReason::Eof, t0 + Duration::from_secs(5)).unwrap(),
        Released::Already
    ));

    ledger.release(eof, &who(), ReleaseReason::Eof, t0 + Duration::from_secs(7)).unwrap();
    assert_eq!(ledger.phases().median(&m), Some(Duration::from_secs(7)), "booked at t0, ended at t0 + 7 s");
    ledger.release(eof, &who(), ReleaseReason::Eof, t0 + Duration::from_secs(9)).unwrap();
    assert_eq!(
        ledger.phases().window(&m).map(|w| w.len()),
        Some(1),
        "a repeated release is no second sample"
    );
}

#[test]
fn the_prefilling_index_keeps_each_decodes_booking_time_and_tokens() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(30);
    let wall = SystemTime::UNIX_EPOCH;
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("p".into(), who(), Duration::from_secs(600), t0);
    let d = TargetKey::from_index(1);
    // Decode booked at t0, its prefill at t1: the age runs from the decode's booking.
    ledger.book(lease, &who(), leg(PickKind::Decode, 1, 100, "a"), t0, wall).unwrap();
    let (p, _) = ledger.book(lease, &who(), leg(PickKind::Prefill, 0, 100, "a"), t1, wall).unwrap();
    ledger.book(lease, &who(), leg(PickKind::Prefill, 0, 7, "b"), t0, wall).unwrap();
    ledger.book(lease, &who(), leg(PickKind::Decode, 1, 7, "b"), t1, wall).unwrap();
    let mut entries: Vec<PrefillingEntry> = ledger.prefilling_on(d).copied().collect();
    entries.sort_by_key(|e| e.tokens);
    assert_eq!(
        entries,
        [PrefillingEntry { booked: t1, tokens: 7 }, PrefillingEntry { booked: t0, tokens: 100 }]
    );
    ledger.release(p, &who(), ReleaseReason::Eof, t1).unwrap();
    assert_eq!(ledger.prefilling_on(d).count(), 1);
    assert_eq!(ledger.prefilling_on(TargetKey::from_index(0)).count(), 0, "prefill targets hold none");
}

#[test]
fn another_identity_can_neither_use_nor_end_a_lease_or_its_reservations() {
    let now = Instant::now();
    let wall = SystemTime::UNIX_EPOCH;
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let (a, b) = (who(), Identity::new("proxy-b").unwrap());
    let lease = ledger.open_lease("a".into(), a.clone(), Duration::from_secs(10), now);
    let (id, _) = ledger.book(lease, &a, booking(0, 100), now, wall).unwrap();
    let before = ledger.total();
    assert!(matches!(ledger.keep_alive(lease, &b, now), Err(ControlError::ForeignLease(_))));
    assert!(matches!(ledger.book(lease, &b, booking(0, 1), now, wall), Err(ControlError::ForeignLease(_))));
    assert!(matches!(
        ledger.release(id, &b, ReleaseReason::Failed, now),
        Err(ControlError::ForeignReservation(_))
    ));
    assert!(matches!(ledger.close_lease(lease, &b, now), Err(ControlError::ForeignLease(_))));
    assert!(matches!(ledger.check_lease(lease, &b, now), Err(ControlError::ForeignLease(_))));
    assert_eq!(ledger.total(), before, "nothing changed");
    assert_eq!(ledger.reservations().len(), 1);
    // The owner still can.
    ledger.keep_alive(lease, &a, now).unwrap();
    assert!(matches!(ledger.release(id, &a, ReleaseReason::Eof, now).unwrap(), Released::Now(..)));
    assert_eq!(ledger.close_lease(lease, &a, now).unwrap().len(), 0);
}

#[test]
fn ids_carry_a_tag_without_which_nothing_is_found() {
    let now = Instant::now();
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let lease = ledger.open_lease("a".into(), who(), Duration::from_secs(10), now);
    assert_ne!(lease.tag, 0);
    let guessed = LeaseId { tag: 0, ..lease };
    assert!(matches!(ledger.keep_alive(guessed, &who(), now), Err(ControlError::UnknownLease(_))));
    let forged = LeaseId { tag: lease.tag.wrapping_add(1), ..lease };
    assert!(matches!(ledger.check_lease(forged, &who(), now), Err(ControlError::UnknownLease(_))));
    assert!(ledger.lease(forged).is_none());
    // Another process's key: the same epoch and sequence, another tag.
    let other =
        Ledger::new(1, IdTags::fixed([2; 32])).open_lease("a".into(), who(), Duration::from_secs(1), now);
    assert_eq!((other.epoch, other.seq), (lease.epoch, lease.seq));
    assert_ne!(other.tag, lease.tag);
}

#[test]
fn open_leases_are_counted_per_owner() {
    let now = Instant::now();
    let mut ledger = Ledger::new(1, IdTags::fixed([1; 32]));
    let b = Identity::new("proxy-b").unwrap();
    let l1 = ledger.open_lease("a".into(), who(), Duration::from_secs(10), now);
    ledger.open_lease("a".into(), who(), Duration::from_millis(100), now);
    ledger.open_lease("b".into(), b.clone(), Duration::from_secs(10), now);
    assert_eq!((ledger.leases_of(&who()), ledger.leases_of(&b)), (2, 1));
    ledger.close_lease(l1, &who(), now).unwrap();
    ledger.expire(now + Duration::from_secs(1));
    assert_eq!((ledger.leases_of(&who()), ledger.leases_of(&b)), (0, 1));
}

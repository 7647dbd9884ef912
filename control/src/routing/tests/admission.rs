//! Fleet admission in the core: a decode pick with an ITL limit books only where the worker's
//! predicted step, with the request, stays within it and within every held request's target.

use super::*;
use crate::admission::{AdmitLimit, PrefillGuard, StepFits};
use crate::fit::regress::Solution;

/// 10 ms a step, plus 5 ms a request and 1 ms per 100 k context tokens on the busiest rank.
fn fit() -> Solution {
    Solution {
        base_ms: 10.0,
        ms_per_request: 5.0,
        ms_per_mtoken: 10.0,
        r_squared: 1.0,
        samples: 100.0,
        weight_tokens: 500_000.0,
        weight_rel_se: 0.0,
        mean_requests: 4.0,
        mean_context_tokens: 0.0,
        tokens_per_step: 1.0,
    }
}

fn fixture() -> Fixture {
    let workers = vec![worker("d0", Role::Decode, "m", 2), worker("d1", Role::Decode, "m", 2)];
    let mut f = Fixture::new(workers, settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin));
    // Only d0 is fitted: d1 has no trusted fit and is not predicted.
    f.core.set_step_fits(StepFits::new([(WorkerId::new("d0"), fit())]));
    f
}

/// A decode pick of request `id` for `tokens` under admission's `limit`, now.
fn decode(f: &mut Fixture, id: &str, tokens: u64, limit: AdmitLimit) -> Result<Picked, ControlError> {
    leg(f, PickKind::Decode, id, tokens, Some(limit))
}

/// A `kind` pick of request `id` for `tokens`, under `limit` if any, now.
fn leg(
    f: &mut Fixture,
    kind: PickKind,
    id: &str,
    tokens: u64,
    limit: Option<AdmitLimit>,
) -> Result<Picked, ControlError> {
    let req = PickRequest { request_id: RequestId::new(id), ..f.req("m", tokens, None) };
    leg_of(f, kind, &req, limit)
}

/// `req` as a `kind` pick, under `limit` if any, now.
fn leg_of(
    f: &mut Fixture,
    kind: PickKind,
    req: &PickRequest,
    limit: Option<AdmitLimit>,
) -> Result<Picked, ControlError> {
    leg_with_kv(f, kind, req, limit, None)
}

/// [`leg_of`] with the KV overlaps `kv` (control computes them when the pick carries hashes).
fn leg_with_kv(
    f: &mut Fixture,
    kind: PickKind,
    req: &PickRequest,
    limit: Option<AdmitLimit>,
    kv: Option<&dyn OverlapSource>,
) -> Result<Picked, ControlError> {
    let ctx = PickContext {
        caller: anon(),
        kv,
        record_decision: false,
        now: f.now,
        wall: SystemTime::now(),
        kv_room: None,
    };
    f.core.pick_within(kind, req, ctx, limit)
}

fn pick(f: &mut Fixture, id: &str, tokens: u64, itl_ms: u32) -> Result<Picked, ControlError> {
    decode(f, id, tokens, AdmitLimit { itl_ms, protect_ttft_ms: None })
}

#[test]
fn a_worker_admits_while_its_predicted_step_stays_within_every_held_target() {
    let mut f = fixture();
    // Drop d1 from the pool: only the fitted worker is a candidate.
    f.core.set_drained(&WorkerId::new("d1"), None, true).unwrap();
    // An idle worker admits whatever its prediction: nothing it holds could step faster.
    let first = pick(&mut f, "a", 0, 12).unwrap();
    assert_eq!(first.chosen.target.worker.as_str(), "d0");
    // One more steps the worker at 20 ms on the same rank, 15 on the other: within this
    // request's 20, but the held one was admitted under 12, and 15 > 12.
    let second = pick(&mut f, "b", 0, 20);
    assert!(matches!(second, Err(ControlError::AdmissionQueued { .. })), "{second:?}");
    f.release(first.reservation).unwrap();
    // Idle again; then a loose first request and a second within its target.
    let loose = pick(&mut f, "c", 0, 100).unwrap();
    let next = pick(&mut f, "d", 0, 16).unwrap();
    assert_ne!(next.chosen.target.rank, loose.chosen.target.rank, "the only rank that keeps 15 ms ≤ 16");
    // Context counts too: 2 M tokens add 20 ms.
    let big = pick(&mut f, "e", 2_000_000, 100);
    assert!(matches!(big, Err(ControlError::AdmissionQueued { .. })), "{big:?}");
    f.release(loose.reservation).unwrap();
    f.release(next.reservation).unwrap();
    let key = f.core.view.key(&first.chosen.target).unwrap();
    assert_eq!(f.core.ledger.tightest_itl_ms(key), None, "every held target released");
}

#[test]
fn with_speculative_decoding_the_target_is_held_against_the_step_per_token() {
    let mut f = fixture();
    f.core.set_drained(&WorkerId::new("d1"), None, true).unwrap();
    // Steps of 15 and 20 ms, as in the test above, but 2.5 tokens a request a step: each
    // token comes every 6 and 8 ms.
    f.core.set_step_fits(StepFits::new([(WorkerId::new("d0"), Solution { tokens_per_step: 2.5, ..fit() })]));
    let first = pick(&mut f, "a", 0, 12).unwrap();
    let second = pick(&mut f, "b", 0, 12).unwrap();
    assert_eq!(second.chosen.target.worker.as_str(), "d0");
    // Two a rank: 20 ms steps, 8 ms a token, over a 7 ms target.
    let third = pick(&mut f, "c", 0, 7);
    assert!(matches!(third, Err(ControlError::AdmissionQueued { .. })), "{third:?}");
    for p in [first, second] {
        f.release(p.reservation).unwrap();
    }
}

#[test]
fn a_worker_without_a_trusted_fit_admits_as_before() {
    let mut f = fixture();
    f.core.set_drained(&WorkerId::new("d0"), None, true).unwrap();
    for i in 0..20 {
        let p = pick(&mut f, &format!("r{i}"), 100_000, 1).unwrap();
        assert_eq!(p.chosen.target.worker.as_str(), "d1");
    }
}

/// One prefill whose phase is 10 ms plus 1 ms per 10 tokens it found queued (its own included),
/// learnt from 40 prefills, 8 at a time, under `guard`.
fn prefill_fixture(guard: PrefillGuard) -> Fixture {
    let workers = vec![worker("p", Role::Prefill, "m", 1), worker("d", Role::Decode, "m", 1)];
    let mut f = Fixture::new(workers, settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin));
    f.core.set_prefill_guard(guard);
    let t0 = f.now;
    for batch in 0..5u64 {
        let start = t0 + Duration::from_secs(batch * 5);
        f.now = start;
        f.core.keep_alive(f.lease, anon(), start).unwrap();
        let picks: Vec<Picked> =
            (0..8u64).map(|i| f.pick(PickKind::Prefill, "m", 1_000 + i * 500).unwrap()).collect();
        let mut found = 0;
        for (i, p) in picks.into_iter().enumerate() {
            found += 1_000 + i as u64 * 500;
            f.now = start + Duration::from_millis(10 + found / 10);
            f.release(p.reservation).unwrap();
        }
    }
    f
}

fn protect(ttft_ms: u32) -> AdmitLimit {
    AdmitLimit { itl_ms: 1_000, protect_ttft_ms: Some(ttft_ms) }
}

#[test]
fn a_lower_class_waits_while_the_prefill_queue_it_would_join_predicts_a_late_first_token() {
    for guard in [PrefillGuard::Queue, PrefillGuard::Off] {
        let mut f = prefill_fixture(guard);
        // An empty prefill: 10 ms + 500 ms for 5,000 tokens, within 2 s.
        let ok = decode(&mut f, "a", 5_000, protect(2_000)).unwrap();
        f.release(ok.reservation).unwrap();
        // 30,000 tokens queued: 3.5 s predicted. A batch request waits, unless the guard is
        // off; the top class never does.
        let queued = f.pick(PickKind::Prefill, "m", 30_000).unwrap();
        let held = decode(&mut f, "b", 5_000, protect(2_000));
        match guard {
            PrefillGuard::Off => {
                f.release(held.unwrap().reservation).unwrap();
            }
            PrefillGuard::Queue => {
                assert!(matches!(held, Err(ControlError::AdmissionQueued { .. })), "{held:?}")
            }
        }
        let top = decode(&mut f, "c", 5_000, AdmitLimit { itl_ms: 1_000, protect_ttft_ms: None }).unwrap();
        f.release(top.reservation).unwrap();
        f.release(queued.reservation).unwrap();
        let after = decode(&mut f, "d", 5_000, protect(2_000)).unwrap();
        f.release(after.reservation).unwrap();
    }
}

/// Waiters admitted one after another (a dispatcher sweep) have not picked their prefills yet:
/// each one counts on the queue the next is predicted against, so the guard admits as many as
/// the prefill can start within the target, not all of them against the same empty queue.
#[test]
fn the_prefill_guard_counts_the_prompts_admitted_before_their_prefill_pick() {
    let mut f = prefill_fixture(PrefillGuard::Queue);
    // An empty prefill: 8,000 tokens predict 0.81 s, 16,000 1.61 s, 24,000 2.41 s.
    let a = decode(&mut f, "a", 8_000, protect(2_000)).unwrap();
    let b = decode(&mut f, "b", 8_000, protect(2_000)).unwrap();
    let c = decode(&mut f, "c", 8_000, protect(2_000));
    assert!(matches!(c, Err(ControlError::AdmissionQueued { .. })), "{c:?}");
    assert_eq!(f.core.ledger.awaiting_prefills(), 2);
    // A picks its prefill: the queue holds it now instead of the forecast, and C still waits.
    let pa = leg(&mut f, PickKind::Prefill, "a", 8_000, None).unwrap();
    let c = decode(&mut f, "c", 8_000, protect(2_000));
    assert!(matches!(c, Err(ControlError::AdmissionQueued { .. })), "{c:?}");
    // B gives up before its prefill pick: C is admitted.
    f.release(b.reservation).unwrap();
    let c = decode(&mut f, "c", 8_000, protect(2_000)).unwrap();
    // The top class is never held, but what it will prefill counts for those below it.
    let top = decode(&mut f, "top", 8_000, AdmitLimit { itl_ms: 1_000, protect_ttft_ms: None }).unwrap();
    let d = decode(&mut f, "d", 1_000, protect(2_000));
    assert!(matches!(d, Err(ControlError::AdmissionQueued { .. })), "{d:?}");
    for p in [a, pa, c, top] {
        f.release(p.reservation).unwrap();
    }
    assert_eq!(f.core.ledger.awaiting_prefills(), 0);
    assert_eq!(f.core.ledger.total(), Load::default());
}

/// The guard predicts with what a request would book, as its prefill pick would: a session's
/// next turn on the prefill that computed its last prompt adds only its new tokens, so a long
/// conversation is not held for a prefix it will not compute again.
#[test]
fn the_prefill_guard_counts_what_a_session_turn_adds() {
    let mut f = prefill_fixture(PrefillGuard::Queue);
    // The session's last turn, 25,000 tokens, prefilled on p in the 2.51 s the fit predicts (so
    // the fit learns nothing new from it), and p's queue is empty again.
    let first = f.req("m", 25_000, Some("s"));
    let last = leg_of(&mut f, PickKind::Prefill, &first, None).unwrap();
    f.now += Duration::from_millis(2_510);
    f.core.keep_alive(f.lease, anon(), f.now).unwrap();
    f.release(last.reservation).unwrap();
    let queued = f.pick(PickKind::Prefill, "m", 10_000).unwrap();
    // Its next turn, 27,000 tokens: 10,000 queued + 2,000 new, 1.21 s predicted; it is admitted.
    let turn = PickRequest { request_id: RequestId::new("turn"), ..f.req("m", 27_000, Some("s")) };
    let admitted = leg_of(&mut f, PickKind::Decode, &turn, Some(protect(2_000))).unwrap();
    f.release(admitted.reservation).unwrap();
    // The same prompt without its session would compute all of it: 3.71 s predicted, it waits.
    let cold = decode(&mut f, "cold", 27_000, protect(2_000));
    assert!(matches!(cold, Err(ControlError::AdmissionQueued { .. })), "{cold:?}");
    // Another session's turn finds nothing of its own cached there either.
    let other = PickRequest { request_id: RequestId::new("other"), ..f.req("m", 27_000, Some("t")) };
    let other = leg_of(&mut f, PickKind::Decode, &other, Some(protect(2_000)));
    assert!(matches!(other, Err(ControlError::AdmissionQueued { .. })), "{other:?}");
    f.release(queued.reservation).unwrap();
}

/// A decode pick that waits in control's queue carries its prompt's page hashes (the proxy sends
/// them then), and the guard credits the pages the KV index says a prefill holds, as the prefill
/// pick would: a prompt cached there is admitted without a session name.
#[test]
fn the_prefill_guard_credits_the_pages_a_prefill_holds() {
    let mut f = prefill_fixture(PrefillGuard::Queue);
    let queued = f.pick(PickKind::Prefill, "m", 10_000).unwrap();
    let prompt: Vec<u32> = (0..27_000).collect();
    let p = f.core.view().worker_targets(&WorkerId::new("p"), Some(DpRank(0))).unwrap()[0];
    let index = super::kv::index_holding_paged(p, &prompt, 25_000, 1);
    let base = PickRequest {
        page_hashes: infera_kv::hash::page_hashes(&prompt, 1).iter().map(|h| h.0).collect(),
        page_size: 1,
        ..f.req("m", 27_000, None)
    };
    let hashed = |id: &str| PickRequest { request_id: RequestId::new(id), ..base.clone() };
    // 10,000 queued + 2,000 not cached: 1.21 s predicted, within 2 s.
    let cached = leg_with_kv(&mut f, PickKind::Decode, &hashed("cached"), Some(protect(2_000)), Some(&index));
    f.release(cached.unwrap().reservation).unwrap();
    // Without the index's answer the whole prompt counts: 3.71 s predicted, it waits.
    let blind = leg_with_kv(&mut f, PickKind::Decode, &hashed("blind"), Some(protect(2_000)), None);
    assert!(matches!(blind, Err(ControlError::AdmissionQueued { .. })), "{blind:?}");
    // Another prompt finds none of its pages there.
    let other = PickRequest { page_hashes: vec![7; 27_000], ..hashed("other") };
    let other = leg_with_kv(&mut f, PickKind::Decode, &other, Some(protect(2_000)), Some(&index));
    assert!(matches!(other, Err(ControlError::AdmissionQueued { .. })), "{other:?}");
    f.release(queued.reservation).unwrap();
}

/// One decode rank holding a PD request whose prefill has run 90 s, against prefills that take
/// 10 s. The decode picks' age decay (control's default) counts it a ninth of a request, but
/// admission counts it whole, decay on or off: a request whose 16 ms target the rank meets alone
/// (10 + 5 ms) would step at 10 + 5 · 2 = 20 ms once the stuck prefill ends, so it waits.
#[test]
fn a_request_stuck_in_prefill_counts_whole_at_admission() {
    use crate::settings::AgeDecay;
    for decay in [AgeDecay::On, AgeDecay::Off] {
        let s = Settings {
            lease_ttl: Duration::from_secs(300),
            prefilling_age_decay: decay,
            ..settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin)
        };
        let workers = vec![worker("d", Role::Decode, "m", 1), worker("p", Role::Prefill, "m", 1)];
        let mut f = Fixture::new(workers, s);
        f.core.set_step_fits(StepFits::new([(WorkerId::new("d"), fit())]));
        let t0 = f.now;
        let warm: Vec<Picked> = (0..5).map(|_| f.pick(PickKind::Prefill, "m", 10).unwrap()).collect();
        f.now = t0 + Duration::from_secs(10);
        for p in warm {
            f.release(p.reservation).unwrap();
        }
        // Its decode is booked, then its prefill: the decode counts as prefilling.
        let stuck = pick(&mut f, "stuck", 0, 1_000).unwrap();
        let prefill = leg(&mut f, PickKind::Prefill, "stuck", 100, None).unwrap();
        f.now = t0 + Duration::from_secs(100);
        f.core.keep_alive(f.lease, anon(), f.now).unwrap();
        let next = pick(&mut f, "next", 0, 16);
        assert!(matches!(next, Err(ControlError::AdmissionQueued { .. })), "{decay:?}: {next:?}");
        // 20 ms is within a 20 ms target: what the rank will step at once the prefill ends.
        let within = pick(&mut f, "within", 0, 20).unwrap();
        f.release(within.reservation).unwrap();
        for r in [Some(stuck.reservation), Some(prefill.reservation), next.ok().map(|p| p.reservation)]
            .into_iter()
            .flatten()
        {
            f.release(r).unwrap();
        }
    }
}

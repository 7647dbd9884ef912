//! The age decay of prefilling requests: a decode rank holding requests that have been in
//! prefill far longer than the model's median prefill phase costs less than one holding fresh
//! ones; with the decay off (or before any phase was measured) the cost is what it was.

use super::*;
use crate::decisions::CandidateTerms;
use crate::scoring::decode_cost;
use crate::settings::AgeDecay;

const W: f64 = 1e6;

fn pick_as(f: &mut Fixture, kind: PickKind, id: &str, tokens: u64) -> Picked {
    let req = PickRequest { request_id: RequestId::new(id), ..f.req("m", tokens, None) };
    let ctx = PickContext {
        caller: anon(),
        kv: None,
        record_decision: true,
        now: f.now,
        wall: SystemTime::now(),
        kv_room: None,
    };
    f.core.pick(kind, &req, ctx).unwrap()
}

/// Both legs of a PD request at `f.now`: its decode pick, then its prefill (still live).
fn pd(f: &mut Fixture, id: &str, tokens: u64) -> u32 {
    let d = rank(&pick_as(f, PickKind::Decode, id, tokens));
    pick_as(f, PickKind::Prefill, id, tokens);
    d
}

/// Rank `old` holds a request prefilling since t = 10 s (5,000 tokens), the other one a request
/// prefilling since t = 100 s (100 tokens); at t = 100 s a new decode is picked. `warm` prefills
/// of 10 s each completed first. Returns the old rank and the new pick.
fn scenario(decay: AgeDecay, warm: usize) -> (u32, Picked) {
    let s = Settings {
        lease_ttl: Duration::from_secs(300),
        prefilling_age_decay: decay,
        ..settings(DecodeInputDemand::On, W, DecodePolicy::RoundRobin)
    };
    let mut f = Fixture::new(vec![worker("d", Role::Decode, "m", 2), worker("p", Role::Prefill, "m", 1)], s);
    let t0 = f.now;
    let warmed: Vec<ReservationId> =
        (0..warm).map(|i| pick_as(&mut f, PickKind::Prefill, &format!("w{i}"), 10).reservation).collect();
    f.now = t0 + Duration::from_secs(10);
    for id in warmed {
        f.release(id).unwrap();
    }
    let old = pd(&mut f, "old", 5_000);
    f.now = t0 + Duration::from_secs(100);
    let fresh = pd(&mut f, "fresh", 100);
    assert_ne!(old, fresh, "the second request goes to the empty rank");
    (old, pick_as(&mut f, PickKind::Decode, "new", 50))
}

fn on_rank(p: &Picked, r: u32) -> CandidateTerms {
    p.decision.as_ref().unwrap().candidates.iter().find(|c| c.target.rank.0 == r).unwrap().clone()
}

#[test]
fn an_old_prefilling_request_counts_less_than_a_fresh_one_with_the_decay() {
    let (old, picked) = scenario(AgeDecay::On, 3);
    assert_eq!(rank(&picked), old, "the rank whose request has waited 90 s, 9× the median, is cheaper");
    let (stuck, fresh) = (on_rank(&picked, old), on_rank(&picked, 1 - old));
    // The median phase is 10 s: the old request (age 90 s) counts 1/9, the fresh one whole.
    assert!((stuck.prefilling_weighted.requests - 1.0 / 9.0).abs() < 1e-12, "{stuck:?}");
    assert!((stuck.prefilling_weighted.tokens - 5_000.0 / 9.0).abs() < 1e-9, "{stuck:?}");
    assert_eq!((fresh.prefilling_weighted.requests, fresh.prefilling_weighted.tokens), (1.0, 100.0));
    assert!((stuck.cost - (5_000.0 / 9.0 + 50.0 + W / 9.0)).abs() < 1e-6, "{stuck:?}");
    assert_eq!(fresh.cost, 100.0 + 50.0 + W);
}

#[test]
fn without_the_decay_or_before_any_phase_the_cost_is_as_it_was() {
    for (decay, warm) in [(AgeDecay::Off, 3), (AgeDecay::On, 0)] {
        let (old, picked) = scenario(decay, warm);
        assert_eq!(rank(&picked), 1 - old, "{decay:?}, {warm} phases: fewer tokens win the tie on requests");
        for c in &picked.decision.as_ref().unwrap().candidates {
            assert_eq!(c.prefilling_weighted, c.load.prefilling.into(), "{decay:?}, {warm} phases");
            assert_eq!(c.cost, decode_cost(c.load, 50, RequestWeight::new(W).unwrap()));
        }
    }
}

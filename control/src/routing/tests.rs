//! The pure core, driven directly: deterministic time and seeds.

use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{
    DecodeInputDemand, DecodePolicy, DpRank, LeaseId, ModelName, PickKind, PickRequest, ReleaseReason,
    RequestId, RequestWeight, ReservationId, Role, SessionKey, WorkerId, WorkerRecord,
};
use proptest::prelude::*;
use rand::{SeedableRng, rngs::SmallRng};

use super::*;

/// The identity of the tests' leases: the open Router's.
fn anon() -> &'static Identity {
    static ANON: std::sync::OnceLock<Identity> = std::sync::OnceLock::new();
    ANON.get_or_init(Identity::anonymous)
}

fn worker(id: &str, role: Role, model: &str, dp: u32) -> WorkerRecord {
    WorkerRecord::new(id, role, format!("http://{id}:30000"), model).with_dp_size(dp)
}

fn settings(mode: DecodeInputDemand, w: f64, policy: DecodePolicy) -> Settings {
    Settings {
        mode,
        weight: RequestWeight::new(w).unwrap(),
        policy,
        prefill_policy: infera_proto::types::PrefillPolicy::CacheAware,
        overlap_credit: crate::settings::OverlapCredit::new(1.0).unwrap(),
        session_slack_tokens: 1_000,
        session_ttl: Duration::from_secs(60),
        session_max: 1_000_000,
        lease_ttl: Duration::from_secs(10),
        prefilling_weight: Default::default(),
        prefilling_age_decay: Default::default(),
    }
}

struct Fixture {
    core: RoutingCore<SmallRng>,
    lease: LeaseId,
    now: Instant,
}

impl Fixture {
    fn new(workers: Vec<WorkerRecord>, s: Settings) -> Self {
        let now = Instant::now();
        let mut core = RoutingCore::new(View::new(workers), s, 1, SmallRng::seed_from_u64(5)).unwrap();
        let lease =
            core.open_lease("test".into(), &Identity::anonymous(), Duration::ZERO, now).unwrap().lease;
        Self { core, lease, now }
    }

    fn req(&self, model: &str, tokens: u64, session: Option<&str>) -> PickRequest {
        PickRequest {
            lease: self.lease,
            request_id: RequestId::new("r"),
            model: ModelName::new(model),
            input_tokens: tokens,
            session: session.map(SessionKey::new),
            page_hashes: Vec::new(),
            page_size: 0,
            exclude: Vec::new(),
            admission: Default::default(),
        }
    }

    fn pick(&mut self, kind: PickKind, model: &str, tokens: u64) -> Result<Picked, ControlError> {
        let req = self.req(model, tokens, None);
        self.pick_req(kind, &req)
    }

    /// `req` picked now, with the decision recorded, without KV index or KV room.
    fn pick_req(&mut self, kind: PickKind, req: &PickRequest) -> Result<Picked, ControlError> {
        let ctx = PickContext {
            caller: anon(),
            kv: None,
            record_decision: true,
            now: self.now,
            wall: SystemTime::now(),
            kv_room: None,
        };
        self.core.pick(kind, req, ctx)
    }

    fn decode(&mut self, tokens: u64) -> Picked {
        self.pick(PickKind::Decode, "m", tokens).unwrap()
    }

    /// Ends a reservation at its end of stream, now.
    fn release(&mut self, id: ReservationId) -> Result<Option<ReleasedNow>, ControlError> {
        self.core.release(Release::new(id, ReleaseReason::Eof), &Identity::anonymous(), self.now)
    }
}

fn rank(p: &Picked) -> u32 {
    p.chosen.target.rank.0
}

#[test]
fn on_mode_with_weight_balances_requests_not_just_tokens() {
    // One long request lands on a rank L; six short ones follow. Returns where each short one
    // went: 'L' or 'O' (the other rank).
    let shorts = |w: f64| {
        let mut f = Fixture::new(
            vec![worker("d", Role::Decode, "m", 2)],
            settings(DecodeInputDemand::On, w, DecodePolicy::RoundRobin),
        );
        let long = rank(&f.decode(100_000));
        (0..6).map(|_| if rank(&f.decode(10_000)) == long { 'L' } else { 'O' }).collect::<String>()
    };
    assert_eq!(shorts(0.0), "OOOOOO", "token-only demand piles short requests on the other rank");
    // W = 50,000, request 10,000: L costs 100k + 10k + 50k·1 = 160k; O with k shorts costs
    // 10k·k + 10k + 50k·k. O wins for k = 0, 1, 2 (10k, 70k, 130k), L at k = 3 (190k > 160k),
    // then O (190k < 220k), then L (250k > 220k).
    assert_eq!(shorts(50_000.0), "OOOLOL");
}

#[test]
fn the_pick_reports_the_terms_before_booking() {
    let mut f = Fixture::new(
        vec![worker("d", Role::Decode, "m", 1)],
        settings(DecodeInputDemand::On, 1_000.0, DecodePolicy::RoundRobin),
    );
    f.decode(300);
    let p = f.decode(200);
    assert_eq!(p.chosen.load, Load { booked_input_tokens: 300, held_requests: 1, ..Load::default() });
    assert_eq!(p.chosen.cost, 300.0 + 200.0 + 1_000.0);
    assert_eq!(p.change.load, Load { booked_input_tokens: 500, held_requests: 2, ..Load::default() });
}

#[test]
fn shadow_keeps_the_legacy_pick_and_records_the_suggestion() {
    let mut f = Fixture::new(
        vec![worker("d", Role::Decode, "m", 4)],
        settings(DecodeInputDemand::Shadow, 1e6, DecodePolicy::RoundRobin),
    );
    let picks: Vec<Picked> = (0..8).map(|_| f.decode(1_000)).collect();
    let ranks: Vec<u32> = picks.iter().map(rank).collect();
    assert_eq!(ranks, [0, 1, 2, 3, 0, 1, 2, 3], "round-robin selects in shadow mode");
    // Empty rank 3: the cost now points there, round-robin goes on with rank 0.
    for p in picks.iter().filter(|p| rank(p) == 3) {
        f.release(p.reservation).unwrap();
    }
    let p = f.decode(1_000);
    assert_eq!(rank(&p), 0, "the legacy pick stands");
    assert_eq!(p.agree, Some(false));
    let d = p.decision.unwrap();
    assert_eq!(d.mode, DecodeInputDemand::Shadow);
    assert_eq!(d.weight.get(), 1e6);
    assert_eq!(d.suggested.unwrap().rank, DpRank(3));
    assert_eq!(d.candidates.len(), 4);
    let terms: Vec<(u64, f64)> = d.candidates.iter().map(|c| (c.load.held_requests, c.cost)).collect();
    assert_eq!(terms, [(2, 2_003_000.0), (2, 2_003_000.0), (2, 2_003_000.0), (0, 1_000.0)]);
    // The ledger booked the legacy choice.
    assert_eq!(p.change.load.held_requests, 3);
}

#[test]
fn shadow_agreement_is_reported() {
    let mut f = Fixture::new(
        vec![worker("d", Role::Decode, "m", 2)],
        settings(DecodeInputDemand::Shadow, 1e6, DecodePolicy::RoundRobin),
    );
    let a = f.decode(1_000); // rank 0, empty ledger: tie → agree
    assert_eq!(a.agree, Some(true));
    let d = a.decision.as_ref().unwrap();
    assert_eq!(d.suggested.as_ref(), Some(&d.chosen), "a tied legacy choice is the suggestion");
    let b = f.decode(1_000); // rank 1: rank 0 holds 1, rank 1 holds 0 → legacy agrees with cost
    assert_eq!((rank(&b), b.agree), (1, Some(true)));
    f.release(a.reservation).unwrap();
    let c = f.decode(1_000); // rank 0 (holds 0) vs rank 1 (holds 1): agree
    assert_eq!((rank(&c), c.agree), (0, Some(true)));
    let d = f.decode(1_000); // rank 1 holds 1, rank 0 holds 1: tie → agree
    assert_eq!(d.agree, Some(true));
    let e = f.decode(1_000); // round-robin rank 0 (holds 1) vs rank 1 (holds 2): agree
    assert_eq!((rank(&e), e.agree), (0, Some(true)));
    let g = f.decode(1_000); // round-robin rank 1 (holds 2) while rank 0 holds 2: tie
    assert_eq!(g.agree, Some(true));
    f.release(e.reservation).unwrap();
    f.release(c.reservation).unwrap();
    // Now rank 0 holds 0 and rank 1 holds 3; round-robin goes to rank 0: agree. Then rank 1: disagree.
    assert_eq!(f.decode(1_000).agree, Some(true));
    let h = f.decode(1_000);
    assert_eq!((rank(&h), h.agree), (1, Some(false)));
    assert_eq!(h.decision.unwrap().suggested.unwrap().rank, DpRank(0));
}

#[test]
fn drained_targets_are_never_picked_and_all_drained_is_unavailable() {
    let mut f = Fixture::new(
        vec![worker("d", Role::Decode, "m", 3)],
        settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin),
    );
    f.core.set_drained(&WorkerId::new("d"), Some(DpRank(1)), true).unwrap();
    for _ in 0..30 {
        assert_ne!(rank(&f.decode(10)), 1);
    }
    f.core.set_drained(&WorkerId::new("d"), None, true).unwrap();
    assert!(matches!(f.pick(PickKind::Decode, "m", 1), Err(ControlError::NoEligibleTarget { .. })));
    f.core.set_drained(&WorkerId::new("d"), Some(DpRank(2)), false).unwrap();
    assert_eq!(rank(&f.decode(1)), 2);
    assert!(matches!(
        f.core.set_drained(&WorkerId::new("d"), Some(DpRank(3)), true),
        Err(ControlError::UnknownTarget(_))
    ));
}

#[test]
fn pools_are_per_model_and_role() {
    let workers = vec![
        worker("p", Role::Prefill, "pd", 2),
        worker("d", Role::Decode, "pd", 2),
        worker("x", Role::Mixed, "agg", 2),
    ];
    let mut f = Fixture::new(workers, settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin));
    assert_eq!(f.pick(PickKind::Prefill, "pd", 1).unwrap().worker.id.as_str(), "p");
    assert_eq!(f.pick(PickKind::Decode, "pd", 1).unwrap().worker.id.as_str(), "d");
    assert_eq!(f.pick(PickKind::Decode, "agg", 1).unwrap().worker.id.as_str(), "x");
    assert!(matches!(f.pick(PickKind::Prefill, "agg", 1), Err(ControlError::NoPool { .. })));
    assert!(matches!(f.pick(PickKind::Decode, "nope", 1), Err(ControlError::UnknownModel(_))));
}

/// A session's turn on prefill: picked, and ended at its end of stream (its next turn comes
/// after its answer).
fn turn(f: &mut Fixture, tokens: u64, session: &str) -> Picked {
    let req = f.req("m", tokens, Some(session));
    let picked = f.pick_req(PickKind::Prefill, &req).unwrap();
    f.release(picked.reservation).unwrap();
    picked
}

/// Books `tokens` of a request without a session on prefill rank `on` of a two-rank worker.
fn prefill_load_on(f: &mut Fixture, tokens: u64, on: u32) -> Picked {
    let first = f.pick(PickKind::Prefill, "m", tokens).unwrap();
    if rank(&first) == on {
        return first;
    }
    let req = PickRequest { exclude: vec![first.chosen.target.clone()], ..f.req("m", tokens, None) };
    let moved = f.pick_req(PickKind::Prefill, &req).unwrap();
    f.release(first.reservation).unwrap();
    moved
}

#[test]
fn sessions_stick_to_their_prefill_unless_it_is_overloaded() {
    let mut f = Fixture::new(
        vec![worker("p", Role::Prefill, "m", 2)],
        settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin),
    );
    let home = rank(&turn(&mut f, 100, "s1"));
    // Home holds the session's last 100 tokens (credit 1, no page hashes: the session's
    // estimate): 100 − 100 cached, against 100 elsewhere. The session stays.
    let second = turn(&mut f, 100, "s1");
    assert_eq!(rank(&second), home);
    assert!(second.chosen.session_affinity);
    // 900 + 100 − 100 against 100: still within the 1,000-token slack.
    let held = prefill_load_on(&mut f, 900, home);
    assert_eq!(rank(&turn(&mut f, 100, "s1")), home);
    // 5,000 + 100 − 100 against 100: home is overloaded beyond its cache and the slack; the
    // session moves and is remembered on its new target.
    f.release(held.reservation).unwrap();
    let _busy = prefill_load_on(&mut f, 5_000, home);
    let moved = turn(&mut f, 100, "s1");
    assert_ne!(rank(&moved), home);
    assert!(!moved.chosen.session_affinity);
    assert_eq!(rank(&turn(&mut f, 100, "s1")), rank(&moved));
    // After the session TTL the session is forgotten.
    f.now += Duration::from_secs(61);
    f.core.sweep_sessions(f.now);
    f.lease = f.core.open_lease("test".into(), &Identity::anonymous(), Duration::ZERO, f.now).unwrap().lease;
    let fresh = f.pick_req(PickKind::Prefill, &f.req("m", 100, Some("s1"))).unwrap();
    let d = fresh.decision.unwrap();
    assert!(d.candidates.iter().all(|c| !c.session_affinity));
    assert!(d.weight.is_zero(), "the prefill cost has no held-request term");
}

/// Without page hashes, a session's previous prefill target is credited with the session's last
/// prompt as cached, as the KV index would credit its pages: a long conversation stays where its
/// prefix is even when that target is busier by more than the slack, and books only what it adds.
/// Only a prefill that reached its end of stream is credited.
#[test]
fn a_session_without_page_hashes_is_credited_with_its_last_prompt_where_it_ran() {
    let mut s = settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin);
    s.overlap_credit = crate::settings::OverlapCredit::new(8.0).unwrap();
    let mut f = Fixture::new(vec![worker("p", Role::Prefill, "m", 2)], s);
    let pick = |f: &mut Fixture, tokens, session: Option<&str>| {
        let req = f.req("m", tokens, session);
        f.pick_req(PickKind::Prefill, &req).unwrap()
    };
    // The session's first turn: 100,000 tokens, booked whole on its home.
    let first = pick(&mut f, 100_000, Some("s1"));
    let (home, other) = (rank(&first), 1 - rank(&first));
    // Until its prefill ends, nothing of it is credited: a pick now books whole, and one
    // cancelled before it was sent computed nothing either.
    let early = pick(&mut f, 104_000, Some("s1"));
    assert_eq!(early.chosen.cached_tokens, 0);
    f.core.release(Release::new(early.reservation, ReleaseReason::Cancelled), anon(), f.now).unwrap();
    f.release(first.reservation).unwrap();
    // Then 100,000 tokens of other requests on home, 60,000 on the other rank.
    let _busy = prefill_load_on(&mut f, 60_000, other);
    let _queued = prefill_load_on(&mut f, 100_000, home);
    // Home is 40,000 tokens busier, far past the 1,000-token slack. The next turn (104,000
    // tokens) costs 100,000 + 104,000 − 8 × 100,000 at home against 60,000 + 104,000 elsewhere.
    let next = pick(&mut f, 104_000, Some("s1"));
    assert_eq!(rank(&next), home, "the conversation stays with its prefix");
    assert!(next.chosen.session_affinity);
    assert_eq!(next.chosen.cached_tokens, 100_000);
    let loads = f.core.targets(Some("m"), Some(Role::Prefill), f.now);
    let home_load = loads.iter().find(|t| t.slot.target.rank.0 == home).unwrap().load;
    assert_eq!(home_load.booked_input_tokens, 100_000 + 4_000, "only the new tokens are booked");
    // Without a session the same request has no estimate: the less loaded rank takes it.
    let anonymous = pick(&mut f, 104_000, None);
    assert_eq!(rank(&anonymous), other);
    assert_eq!(anonymous.chosen.cached_tokens, 0);
}

#[test]
fn weight_needs_a_scoring_mode_both_ways() {
    let s = settings(DecodeInputDemand::Off, 5.0, DecodePolicy::RoundRobin);
    assert!(matches!(
        RoutingCore::new(View::default(), s, 1, SmallRng::seed_from_u64(0)),
        Err(ControlError::WeightNeedsDemand { .. })
    ));
    let mut f = Fixture::new(vec![], settings(DecodeInputDemand::Off, 0.0, DecodePolicy::RoundRobin));
    assert!(f.core.set_weight(RequestWeight::new(1.0).unwrap()).is_err());
    f.core.set_mode(DecodeInputDemand::Shadow).unwrap();
    f.core.set_weight(RequestWeight::new(1.0).unwrap()).unwrap();
    assert!(f.core.set_mode(DecodeInputDemand::Off).is_err(), "turning the mode off under W > 0");
    assert_eq!(f.core.settings().mode, DecodeInputDemand::Shadow, "a rejected change changes nothing");
    f.core.set_weight(RequestWeight::ZERO).unwrap();
    f.core.set_mode(DecodeInputDemand::Off).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the mode, policy, drains and releases, a pick never lands on an ineligible
    /// target and the ledger ends at zero.
    #[test]
    fn picks_respect_drains_and_the_ledger_ends_at_zero(
        mode in prop_oneof![Just(DecodeInputDemand::Off), Just(DecodeInputDemand::Shadow), Just(DecodeInputDemand::On)],
        policy in prop_oneof![Just(DecodePolicy::RoundRobin), Just(DecodePolicy::Random), Just(DecodePolicy::PowerOfTwo), Just(DecodePolicy::LeastRunning)],
        ops in prop::collection::vec((0u8..4, 0u32..4, 1u64..50_000), 1..150),
    ) {
        let w = if mode == DecodeInputDemand::Off { 0.0 } else { 10_000.0 };
        let mut f = Fixture::new(vec![worker("d", Role::Decode, "m", 4)], settings(mode, w, policy));
        let mut held = Vec::new();
        let mut drained = [false; 4];
        for (op, r, tokens) in ops {
            match op {
                0 | 1 => match f.pick(PickKind::Decode, "m", tokens) {
                    Ok(p) => { prop_assert!(!drained[rank(&p) as usize]); held.push(p.reservation); }
                    Err(ControlError::NoEligibleTarget { .. }) => prop_assert!(drained.iter().all(|d| *d)),
                    Err(e) => prop_assert!(false, "{e}"),
                },
                2 if !held.is_empty() => {
                    let id = held.swap_remove(tokens as usize % held.len());
                    prop_assert!(f.release(id).unwrap().is_some());
                    prop_assert!(f.release(id).unwrap().is_none(), "second release is a no-op");
                }
                _ => {
                    drained[r as usize] = !drained[r as usize];
                    f.core.set_drained(&WorkerId::new("d"), Some(DpRank(r)), drained[r as usize]).unwrap();
                }
            }
        }
        for id in held { f.release(id).unwrap(); }
        prop_assert_eq!(f.core.total_load(), Load::default());
    }
}

mod admission;
mod auto_weight;
mod headroom;
mod kv;
mod ownership;
mod pairing;
mod prefilling_age;
mod redeclare;

#[test]
fn round_robin_prefill_ignores_overlap_and_load() {
    let mut s = settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin);
    s.prefill_policy = infera_proto::types::PrefillPolicy::RoundRobin;
    let mut f = Fixture::new(vec![worker("p", Role::Prefill, "m", 3)], s);
    let ranks: Vec<u32> = (0..6).map(|_| rank(&f.pick(PickKind::Prefill, "m", 1_000).unwrap())).collect();
    assert_eq!(ranks, vec![0, 1, 2, 0, 1, 2], "bookings held, still in turn");
}

#[test]
fn a_worker_that_registers_again_with_more_ranks_serves_all_of_them() {
    let s = settings(DecodeInputDemand::Off, 0.0, DecodePolicy::RoundRobin);
    let mut f = Fixture::new(vec![worker("d", Role::Decode, "m", 2)], s);
    f.core.upsert_worker(worker("d", Role::Decode, "m", 4));
    assert_eq!(f.core.targets(None, None, f.now).len(), 4);
    let ranks: Vec<u32> = (0..4).map(|_| rank(&f.decode(1))).collect();
    assert_eq!(ranks, [0, 1, 2, 3]);
}

#[test]
fn round_robin_goes_on_while_a_pool_lives_and_starts_over_once_it_emptied() {
    let s = settings(DecodeInputDemand::Off, 0.0, DecodePolicy::RoundRobin);
    let mut f = Fixture::new(vec![worker("d", Role::Decode, "m", 3)], s);
    assert_eq!((rank(&f.decode(1)), rank(&f.decode(1))), (0, 1));
    f.core.upsert_worker(worker("e", Role::Decode, "other", 1));
    assert_eq!(rank(&f.decode(1)), 2, "another pool's change keeps this pool's turn");
    assert!(f.core.remove_worker(&WorkerId::new("d")));
    f.core.upsert_worker(worker("d", Role::Decode, "m", 3));
    assert_eq!(rank(&f.decode(1)), 0, "the pool emptied: its turn starts over");
}

//! KV headroom: a decode candidate whose engine KV would overflow is passed by, unless all
//! would.

use std::collections::HashMap;

use infera_proto::types::Target;

use super::*;
use crate::target::{KvRoom, KvUse};

/// Capacities per rank of worker `d`, with nothing in use.
#[derive(Debug)]
struct Room(HashMap<u32, u64>);

impl KvRoom for Room {
    fn kv_use(&self, target: &Target) -> Option<KvUse> {
        self.0.get(&target.rank.0).map(|&capacity_tokens| KvUse { used_tokens: 0, capacity_tokens })
    }
}

fn pick_with(f: &mut Fixture, tokens: u64, room: &Room) -> Picked {
    let req = PickRequest { request_id: RequestId::new(format!("r{tokens}")), ..f.req("m", tokens, None) };
    let ctx = PickContext {
        caller: anon(),
        kv: None,
        record_decision: true,
        now: f.now,
        wall: SystemTime::now(),
        kv_room: Some(room),
    };
    f.core.pick(PickKind::Decode, &req, ctx).unwrap()
}

#[test]
fn a_rank_whose_kv_would_overflow_is_passed_by_unless_all_would() {
    let s = settings(DecodeInputDemand::On, 1e6, DecodePolicy::RoundRobin);
    let mut f = Fixture::new(vec![worker("d", Role::Decode, "m", 2)], s);
    let room = Room(HashMap::from([(0, 10_000), (1, 10_000)]));
    // Rank a holds one long request, rank b two short ones.
    let a = rank(&pick_with(&mut f, 9_000, &room));
    let b = 1 - a;
    assert_eq!(rank(&pick_with(&mut f, 10, &room)), b);
    assert_eq!(rank(&pick_with(&mut f, 10, &room)), b, "a holds one request, b one: tokens decide");
    // The cost prefers a (one request against two), but 9,000 + 2,000 > 10,000 on a.
    let p = pick_with(&mut f, 2_000, &room);
    assert_eq!(rank(&p), b, "a would overflow");
    let d = p.decision.unwrap();
    let on = |r: u32| d.candidates.iter().find(|c| c.target.rank.0 == r).unwrap().clone();
    assert!(on(a).kv_overflow && on(a).cost.is_infinite(), "{:?}", on(a));
    assert!(!on(b).kv_overflow && on(b).cost.is_finite());
    // A request that fits nowhere: nothing is passed by, the cost decides as without the check.
    let p = pick_with(&mut f, 50_000, &room);
    let d = p.decision.unwrap();
    assert!(d.candidates.iter().all(|c| c.kv_overflow && c.cost.is_finite()), "{:?}", d.candidates);
}

#[test]
fn without_a_reported_capacity_nothing_is_checked() {
    let s = settings(DecodeInputDemand::On, 1e6, DecodePolicy::RoundRobin);
    let mut f = Fixture::new(vec![worker("d", Role::Decode, "m", 2)], s);
    let room = Room(HashMap::new());
    let p = pick_with(&mut f, 1_000_000, &room);
    assert!(p.decision.unwrap().candidates.iter().all(|c| !c.kv_overflow));
}

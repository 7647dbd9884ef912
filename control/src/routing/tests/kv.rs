//! Prefill picks credited with the KV prefix index's overlap.

use infera_kv::event::{KvEvent, Medium};
use infera_kv::hash::page_hashes;

use super::*;

const PS: u32 = 16;

fn prefill_pool(page_size: u32) -> Fixture {
    prefill_pool_with_credit(page_size, 1.0)
}

fn prefill_pool_with_credit(page_size: u32, credit: f64) -> Fixture {
    let mut p = worker("p", Role::Prefill, "m", 2);
    p.page_size = page_size;
    let mut s = settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin);
    s.overlap_credit = crate::settings::OverlapCredit::new(credit).unwrap();
    Fixture::new(vec![p], s)
}

fn key(f: &mut Fixture, r: u32) -> TargetKey {
    f.core.view().worker_targets(&WorkerId::new("p"), Some(DpRank(r))).unwrap()[0]
}

/// An index where `key` holds the first `pages` pages of `prompt`.
fn index_holding(key: TargetKey, prompt: &[u32], pages: usize) -> KvIndex {
    index_holding_paged(key, prompt, pages, PS)
}

/// An index where `key` holds the first `pages` pages of `prompt`, `page_size` tokens each.
pub(super) fn index_holding_paged(key: TargetKey, prompt: &[u32], pages: usize, page_size: u32) -> KvIndex {
    let mut index = KvIndex::new(1 << 20);
    let hashes = page_hashes(prompt, page_size as usize);
    index.apply(
        key,
        &KvEvent::BlockStored {
            block_hashes: hashes[..pages].iter().map(|h| h.0).collect(),
            parent_block_hash: None,
            token_ids: prompt[..pages * page_size as usize].iter().map(|&t| u64::from(t)).collect(),
            block_size: page_size,
            medium: Medium::Gpu,
            cache_salt: None,
            lora_name: None,
        },
    );
    index
}

fn kv_pick(f: &mut Fixture, index: &KvIndex, prompt: &[u32], page_size: u32) -> Picked {
    let mut req = f.req("m", prompt.len() as u64, None);
    req.page_hashes = page_hashes(prompt, page_size as usize).iter().map(|h| h.0).collect();
    req.page_size = page_size;
    f.core
        .pick(
            PickKind::Prefill,
            &req,
            PickContext {
                caller: anon(),
                kv: Some(index),
                record_decision: true,
                now: f.now,
                wall: SystemTime::now(),
                kv_room: None,
            },
        )
        .unwrap()
}

#[test]
fn the_prefill_that_holds_the_prefix_wins_and_books_only_what_it_computes() {
    let mut f = prefill_pool(PS);
    let prompt: Vec<u32> = (0..1_000).collect();
    let holder = key(&mut f, 1);
    let index = index_holding(holder, &prompt, 40);
    let p = kv_pick(&mut f, &index, &prompt, PS);
    assert_eq!(rank(&p), 1);
    assert_eq!((p.chosen.overlap_pages, p.chosen.cached_tokens), (40, 640));
    assert_eq!(p.best_cached_tokens, 640, "the holder was the best-placed candidate");
    let d = p.decision.unwrap();
    let other = d.candidates.iter().find(|c| c.target.rank.0 == 0).unwrap();
    assert_eq!((other.overlap_pages, other.cached_tokens), (0, 0), "the decision shows every overlap");
    // Booked: the 360 tokens rank 1 still has to compute, not the 1,000 of the prompt.
    assert_eq!(f.core.target_rows(&[holder], f.now)[0].load.booked_input_tokens, 360);
    f.release(p.reservation).unwrap();
    // The index, not the picks, says what a target holds: the same prompt again sees 40 pages.
    let again = kv_pick(&mut f, &index, &prompt, PS);
    assert_eq!((rank(&again), again.chosen.overlap_pages), (1, 40));
    f.release(again.reservation).unwrap();
}

#[test]
fn load_outweighs_an_overlap_that_saves_less_than_it_costs() {
    let p = holder_under_load(1.0);
    assert_eq!((p.chosen, p.costs), (0, vec![1_000.0, 5_360.0]));
    // What the pick gave up for load, as the prefix metrics count it (`metrics/prefix_hits.rs`).
    assert_eq!((p.chosen_cached, p.best_cached), (0, 640));
}

#[test]
fn a_larger_overlap_credit_keeps_the_holder_under_the_same_load() {
    // 640 cached tokens × 10 outweigh the 4,000 more tokens rank 1 has queued.
    let p = holder_under_load(10.0);
    assert_eq!((p.chosen, p.costs), (1, vec![1_000.0, 5_000.0 + 1_000.0 - 6_400.0]));
    assert_eq!((p.chosen_cached, p.best_cached), (640, 640));
    // Credit 0 is load only: the holder's overlap does not count at all.
    let p = holder_under_load(0.0);
    assert_eq!((p.chosen, p.costs), (0, vec![1_000.0, 6_000.0]));
}

/// Rank 1 holds 40 pages (640 tokens) of a 1,000-token prompt and already computes 5,000
/// tokens; rank 0 is idle.
fn holder_under_load(credit: f64) -> HolderPick {
    let mut f = prefill_pool_with_credit(PS, credit);
    let prompt: Vec<u32> = (0..1_000).collect();
    let holder = key(&mut f, 1);
    let index = index_holding(holder, &prompt, 40);
    // Rank 1 already computes 5,000 tokens: 5,000 + 360 against 0 + 1,000 on rank 0.
    let req = f.req("m", 5_000, None);
    loop {
        let p = f
            .core
            .pick(
                PickKind::Prefill,
                &req,
                PickContext {
                    caller: anon(),
                    kv: None,
                    record_decision: false,
                    now: f.now,
                    wall: SystemTime::now(),
                    kv_room: None,
                },
            )
            .unwrap();
        if rank(&p) == 1 {
            break;
        }
        f.release(p.reservation).unwrap();
    }
    let p = kv_pick(&mut f, &index, &prompt, PS);
    let costs = p.decision.as_ref().unwrap().candidates.iter().map(|c| c.cost).collect();
    HolderPick {
        chosen: rank(&p),
        costs,
        chosen_cached: p.chosen.cached_tokens,
        best_cached: p.best_cached_tokens,
    }
}

/// Where [`holder_under_load`]'s prompt went.
struct HolderPick {
    /// The rank it went to.
    chosen: u32,
    /// Every candidate's cost.
    costs: Vec<f64>,
    /// Tokens the chosen rank held.
    chosen_cached: u64,
    /// Tokens the best-placed rank held.
    best_cached: u64,
}

#[test]
fn a_prompt_hashed_with_another_page_size_gets_no_credit() {
    let mut f = prefill_pool(PS);
    let prompt: Vec<u32> = (0..1_000).collect();
    let holder = key(&mut f, 1);
    let index = index_holding(holder, &prompt, 40);
    let p = kv_pick(&mut f, &index, &prompt, 32);
    assert!(p.decision.unwrap().candidates.iter().all(|c| c.cached_tokens == 0));
}

/// A session's previous prefill target keeps it within the slack (1,000 here); a target holding
/// the prompt wins it when its credited cost undercuts the old target's by more than that.
fn session_moves_to_the_holder(credit: f64) -> (u32, u32, Vec<f64>) {
    let mut f = prefill_pool_with_credit(PS, credit);
    let prompt: Vec<u32> = (0..1_000).collect();
    let first = f.core.pick(
        PickKind::Prefill,
        &f.req("m", 1_000, Some("s")),
        PickContext {
            caller: anon(),
            kv: None,
            record_decision: false,
            now: f.now,
            wall: SystemTime::now(),
            kv_room: None,
        },
    );
    let first = first.unwrap();
    f.release(first.reservation).unwrap();
    let other = 1 - rank(&first);
    let index = index_holding(key(&mut f, other), &prompt, 40);
    let mut req = f.req("m", 1_000, Some("s"));
    req.page_hashes = page_hashes(&prompt, PS as usize).iter().map(|h| h.0).collect();
    req.page_size = PS;
    let p = f
        .core
        .pick(
            PickKind::Prefill,
            &req,
            PickContext {
                caller: anon(),
                kv: Some(&index),
                record_decision: true,
                now: f.now,
                wall: SystemTime::now(),
                kv_room: None,
            },
        )
        .unwrap();
    let costs = p.decision.as_ref().unwrap().candidates.iter().map(|c| c.cost).collect();
    (rank(&first), rank(&p), costs)
}

#[test]
fn a_session_keeps_its_target_at_credit_1_and_follows_the_prefix_at_credit_8() {
    // Credit 1: the holder costs 360, the session's target 1,000, within the slack.
    let (first, then, costs) = session_moves_to_the_holder(1.0);
    assert_eq!(then, first);
    assert_eq!(costs.iter().copied().fold(f64::INFINITY, f64::min), 360.0);
    // Credit 8: the holder's cost goes below zero (1,000 − 8 × 640) and takes the session.
    let (first, then, costs) = session_moves_to_the_holder(8.0);
    assert_eq!(then, 1 - first);
    assert_eq!(costs.iter().copied().fold(f64::INFINITY, f64::min), 1_000.0 - 5_120.0);
}

/// As `ControlState::pick` does it: the pool's keys, overlaps computed outside the pick, then the
/// pick credited from them; the same choice and credit as asking the index inside the pick, and a
/// candidate the precomputed overlaps do not name (it joined in between) is credited nothing.
#[test]
fn overlaps_computed_before_the_pick_credit_like_the_index() {
    let mut f = prefill_pool(PS);
    let prompt: Vec<u32> = (0..1_000).collect();
    let holder = key(&mut f, 1);
    let index = index_holding(holder, &prompt, 40);
    let hashes: Vec<i64> = page_hashes(&prompt, PS as usize).iter().map(|h| h.0).collect();
    let mut keys = Vec::new();
    f.core.pool_keys(&ModelName::new("m"), PickKind::Prefill, &mut keys);
    assert_eq!(keys.len(), 2);
    let computed = crate::routing::Overlaps::compute(&index, &hashes, keys);
    let mut req = f.req("m", prompt.len() as u64, None);
    req.page_hashes = hashes.clone();
    req.page_size = PS;
    fn ctx(kv: &dyn crate::routing::OverlapSource, now: Instant) -> PickContext<'_> {
        PickContext {
            caller: anon(),
            kv: Some(kv),
            record_decision: false,
            now,
            wall: SystemTime::now(),
            kv_room: None,
        }
    }
    let p = f.core.pick(PickKind::Prefill, &req, ctx(&computed, f.now)).unwrap();
    assert_eq!((rank(&p), p.chosen.overlap_pages, p.chosen.cached_tokens), (1, 40, 640));
    f.release(p.reservation).unwrap();
    let none = crate::routing::Overlaps::compute(&index, &hashes, vec![key(&mut f, 0)]);
    let p = f.core.pick(PickKind::Prefill, &req, ctx(&none, f.now)).unwrap();
    assert_eq!((p.chosen.overlap_pages, p.chosen.cached_tokens), (0, 0), "rank 1 was not asked");
    f.release(p.reservation).unwrap();
    let mut keys = vec![holder];
    f.core.pool_keys(&ModelName::new("nope"), PickKind::Prefill, &mut keys);
    assert!(keys.is_empty(), "no pool: no keys");
}

/// Which pool's overlaps control computes before a pick: a hashed prefill pick's own; a hashed
/// decode pick's prefills only when the prefill guard may hold it; nothing without hashes.
#[test]
fn overlaps_are_computed_for_hashed_prefill_picks_and_guarded_decode_picks() {
    use crate::admission::AdmitLimit;
    use crate::routing::Overlaps;
    let f = prefill_pool(PS);
    let plain = f.req("m", 100, None);
    let hashed = PickRequest { page_hashes: vec![1, 2], page_size: PS, ..plain.clone() };
    let guarded = Some(AdmitLimit { itl_ms: 100, protect_ttft_ms: Some(2_000) });
    let top = Some(AdmitLimit { itl_ms: 100, protect_ttft_ms: None });
    assert_eq!(Overlaps::needed_for(PickKind::Prefill, &hashed, None), Some(PickKind::Prefill));
    assert_eq!(Overlaps::needed_for(PickKind::Decode, &hashed, guarded), Some(PickKind::Prefill));
    assert_eq!(Overlaps::needed_for(PickKind::Decode, &hashed, top), None);
    assert_eq!(Overlaps::needed_for(PickKind::Decode, &hashed, None), None);
    assert_eq!(Overlaps::needed_for(PickKind::Prefill, &plain, None), None);
    assert_eq!(Overlaps::needed_for(PickKind::Decode, &plain, guarded), None);
}

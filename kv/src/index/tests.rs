use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::hash::{page_hashes, salted_page_hashes};

const PS: u32 = 4;

/// Engine hashes for a prompt's pages: SGLang's own (no namespace) xor a salt (a namespaced engine).
fn engine_hashes(tokens: &[u32], salt: i64) -> Vec<i64> {
    salted_engine_hashes(tokens, None, salt)
}

/// The query (the proxy's hashes) of a prompt sent with `cache_salt`.
fn salted_query(tokens: &[u32], cache_salt: Option<&str>) -> Vec<PageHash> {
    salted_page_hashes(cache_salt, tokens, PS as usize)
}

/// Engine hashes of a prompt stored under `cache_salt`, xor `opaque` (a namespace no router
/// can compute, as a LoRA adapter's).
fn salted_engine_hashes(tokens: &[u32], cache_salt: Option<&str>, opaque: i64) -> Vec<i64> {
    salted_query(tokens, cache_salt).into_iter().map(|h| h.0 ^ opaque).collect()
}

/// The `BlockStored` for pages `from..to` of a prompt, chained on page `from - 1`.
fn stored(tokens: &[u32], from: usize, to: usize, salt: i64) -> KvEvent {
    salted_stored(tokens, from, to, None, salt)
}

/// [`stored`] of a request with `cache_salt`.
fn salted_stored(tokens: &[u32], from: usize, to: usize, cache_salt: Option<&str>, opaque: i64) -> KvEvent {
    let engine = salted_engine_hashes(tokens, cache_salt, opaque);
    let ps = PS as usize;
    KvEvent::BlockStored {
        block_hashes: engine[from..to].to_vec(),
        parent_block_hash: from.checked_sub(1).map(|p| engine[p]),
        token_ids: tokens[from * ps..to * ps].iter().map(|&t| u64::from(t)).collect(),
        block_size: PS,
        medium: Medium::Gpu,
        cache_salt: cache_salt.map(str::to_owned),
        lora_name: None,
    }
}

fn removed(tokens: &[u32], pages: &[usize], salt: i64) -> KvEvent {
    let engine = engine_hashes(tokens, salt);
    KvEvent::BlockRemoved { block_hashes: pages.iter().map(|&p| engine[p]).collect(), medium: Medium::Gpu }
}

fn prompt(seed: u32, pages: usize) -> Vec<u32> {
    (0..pages as u32 * PS).map(|i| seed * 1000 + i).collect()
}

#[test]
fn overlap_is_the_leading_run_of_held_pages() {
    let mut index = PrefixIndex::new(1000);
    let p = prompt(1, 6);
    index.apply(7u32, &stored(&p, 0, 2, 0));
    index.apply(7, &stored(&p, 2, 5, 0));
    let q = page_hashes(&p, PS as usize);
    assert_eq!(index.overlap(&q, 7), 5);
    assert_eq!(index.overlap(&q, 8), 0);
    // A prompt that diverges in page 3 shares 3 pages.
    let mut other = p.clone();
    other[3 * PS as usize] = 99_999;
    assert_eq!(index.overlap(&page_hashes(&other, PS as usize), 7), 3);
    // The middle page goes: the run stops before it.
    index.apply(7, &removed(&p, &[2], 0));
    assert_eq!(index.overlap(&q, 7), 2);
    let mut out = Vec::new();
    index.overlaps(&q, &[8, 7], &mut out);
    assert_eq!(out, vec![0, 2]);
    assert_eq!(index.stats().blocks, 4);
    index.apply(7, &KvEvent::AllBlocksCleared);
    assert_eq!(index.overlap(&q, 7), 0);
    assert_eq!(index.stats().blocks, 0);
    assert!(index.targets.is_empty(), "no page entry outlives its blocks");
}

#[test]
fn namespaced_engine_hashes_key_on_tokens() {
    let mut index = PrefixIndex::new(1000);
    let p = prompt(2, 3);
    // Two salts: two engine chains with the same tokens on one target.
    index.apply(1u32, &stored(&p, 0, 3, 0x5a5a));
    index.apply(1, &stored(&p, 0, 3, 0x1234));
    let q = page_hashes(&p, PS as usize);
    assert_eq!(index.overlap(&q, 1), 3);
    index.apply(1, &removed(&p, &[0, 1, 2], 0x5a5a));
    assert_eq!(index.overlap(&q, 1), 3, "the other chain still holds the pages");
    index.apply(1, &removed(&p, &[0], 0x1234));
    assert_eq!(index.overlap(&q, 1), 0);
}

#[test]
fn what_cannot_be_keyed_is_counted_not_guessed() {
    let mut index = PrefixIndex::new(3);
    let p = prompt(3, 6);
    // Parent never seen (events missed): nothing recorded.
    index.apply(1u32, &stored(&p, 2, 4, 0));
    assert_eq!(index.stats().counts.orphans, 2);
    // Budget of 3 blocks: the rest is dropped, the overlap stays honest.
    index.apply(1, &stored(&p, 0, 6, 0));
    let stats = index.stats();
    assert_eq!((stats.blocks, stats.counts.over_budget), (3, 3));
    assert_eq!(index.overlap(&page_hashes(&p, PS as usize), 1), 3);
    // Host-tier copies and unknown removals change nothing.
    index.apply(1, &KvEvent::BlockRemoved { block_hashes: engine_hashes(&p, 0), medium: Medium::CpuPinned });
    index.apply(1, &removed(&prompt(4, 1), &[0], 0));
    let stats = index.stats();
    assert_eq!((stats.blocks, stats.counts.other_medium, stats.counts.unknown_removals), (3, 1, 1));
}

#[test]
fn a_replayed_batch_changes_nothing() {
    let mut index = PrefixIndex::new(100);
    let p = prompt(5, 4);
    let batch = EventBatch { ts: 0.0, events: vec![stored(&p, 0, 4, 0)], attn_dp_rank: Some(0) };
    index.apply_batch(0u32, &batch);
    let before = index.stats().blocks;
    index.apply_batch(0, &batch);
    assert_eq!(index.stats().blocks, before);
    index.apply(0, &removed(&p, &[3], 0));
    assert_eq!(index.overlap(&page_hashes(&p, PS as usize), 0), 3);
}

#[derive(Clone, Debug)]
enum Op {
    /// Store pages `0..n` of document `doc` on `target` (parents first, as an engine does),
    /// under salt `salt` (0: none), its hashes namespaced past it when `opaque` (a LoRA's).
    Store {
        target: u8,
        doc: u8,
        n: usize,
        salt: u8,
        opaque: bool,
    },
    /// Remove the deepest page of document `doc` under `salt` (and `opaque`) on `target`.
    Evict {
        target: u8,
        doc: u8,
        salt: u8,
        opaque: bool,
    },
    Clear {
        target: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3u8, 0..4u8, 1..6usize, 0..3u8, any::<bool>())
            .prop_map(|(target, doc, n, salt, opaque)| Op::Store { target, doc, n, salt, opaque }),
        2 => (0..3u8, 0..4u8, 0..3u8, any::<bool>())
            .prop_map(|(target, doc, salt, opaque)| Op::Evict { target, doc, salt, opaque }),
        1 => (0..3u8).prop_map(|target| Op::Clear { target }),
    ]
}

/// Documents that share prefixes: doc d = a common first two pages, then pages of its own.
fn doc(d: u8) -> Vec<u32> {
    let mut t = prompt(0, 2);
    t.extend(prompt(u32::from(d) + 1, 4));
    t
}

/// Salt `s` of the property test: 0 none, 1 and 2 two tenants'.
fn salt_of(s: u8) -> Option<&'static str> {
    [None, Some("tenant-a"), Some("tenant-b")][usize::from(s)]
}

/// What the property test XORs into an opaquely namespaced store's hashes.
fn opaque_of(opaque: bool) -> i64 {
    if opaque { 0x5a5a } else { 0 }
}

proptest! {
    /// Against a model that keeps, per target, the set of (salt, full token prefix) held: the
    /// index's overlap for every document and salt equals the model's, and its block count equals
    /// the model's. A salt is a namespace: a prefix held under one counts for no other; an opaque
    /// namespace past it (rehashed from the tokens) counts as its salt's.
    #[test]
    fn the_index_agrees_with_a_model(ops in prop::collection::vec(op(), 1..60)) {
        let mut index = PrefixIndex::new(usize::MAX);
        let mut model: HashMap<u8, HashMap<i64, (u8, Vec<u32>)>> = HashMap::new();
        let ps = PS as usize;
        for op in ops {
            match op {
                Op::Store { target, doc: d, n, salt, opaque } => {
                    let t = doc(d);
                    let opaque = opaque_of(opaque);
                    index.apply(target, &salted_stored(&t, 0, n, salt_of(salt), opaque));
                    let m = model.entry(target).or_default();
                    for (i, h) in salted_engine_hashes(&t, salt_of(salt), opaque).into_iter().take(n).enumerate() {
                        m.insert(h, (salt, t[..(i + 1) * ps].to_vec()));
                    }
                }
                Op::Evict { target, doc: d, salt, opaque } => {
                    let t = doc(d);
                    let m = model.entry(target).or_default();
                    let engine = salted_engine_hashes(&t, salt_of(salt), opaque_of(opaque));
                    if let Some(deepest) = (0..engine.len()).rev().find(|&i| m.contains_key(&engine[i])) {
                        let gone = KvEvent::BlockRemoved { block_hashes: vec![engine[deepest]], medium: Medium::Gpu };
                        index.apply(target, &gone);
                        m.remove(&engine[deepest]);
                    }
                }
                Op::Clear { target } => {
                    index.apply(target, &KvEvent::AllBlocksCleared);
                    model.remove(&target);
                }
            }
        }
        let total: usize = model.values().map(HashMap::len).sum();
        prop_assert_eq!(index.stats().blocks, total);
        for (d, salt) in (0..4).flat_map(|d| (0..3u8).map(move |s| (d, s))) {
            let t = doc(d);
            let q = salted_query(&t, salt_of(salt));
            for target in 0..3u8 {
                let held = model.get(&target);
                let expect = (1..=q.len())
                    .take_while(|&i| held.is_some_and(|m| m.values().any(|(s, p)| *s == salt && p[..] == t[..i * ps])))
                    .count();
                prop_assert_eq!(index.overlap(&q, target), expect, "doc {} salt {} target {}", d, salt, target);
            }
        }
    }
}

#[test]
fn a_batch_chains_on_its_own_stores_and_sees_its_own_removals() {
    let mut index = PrefixIndex::new(100);
    let p = prompt(6, 4);
    // One batch: clear, store 0..2, store 2..4 chained on page 1 (known only in this batch), remove
    // page 3, store page 3 again chained on page 2; then a store chained on a page the clear dropped.
    let events = vec![
        KvEvent::AllBlocksCleared,
        stored(&p, 0, 2, 0),
        stored(&p, 2, 4, 0),
        removed(&p, &[3], 0),
        stored(&p, 3, 4, 0),
        stored(&prompt(7, 2), 1, 2, 0),
    ];
    index.apply(9u32, &stored(&prompt(7, 2), 0, 2, 0));
    let prepared = index.prepare(9, &events);
    index.commit(9, prepared);
    let q = page_hashes(&p, PS as usize);
    assert_eq!(index.overlap(&q, 9), 4, "page 3 was stored again after its removal");
    assert_eq!(index.stats().blocks, 4);
    assert_eq!(index.overlap(&page_hashes(&prompt(7, 2), PS as usize), 9), 0, "cleared");
    assert_eq!(index.stats().counts.orphans, 1, "its parent went with the clear");
}

/// Below a first page whose published hash is SGLang's own, the engine's hashes are the keys (no
/// rehash: the page carries other tokens than its hash says and is still keyed by its hash); below
/// a namespaced first page, the tokens are hashed. Only namespaced blocks keep a digest.
#[test]
fn a_chain_hashed_like_sglang_is_keyed_by_its_hashes_a_namespaced_one_by_its_tokens() {
    let p = prompt(8, 3);
    let q = page_hashes(&p, PS as usize);
    let ps = PS as usize;
    let mut child = stored(&p, 1, 3, 0);
    let KvEvent::BlockStored { token_ids, .. } = &mut child else { unreachable!() };
    token_ids[..ps].fill(4_242);

    let mut index = PrefixIndex::new(100);
    index.apply(1u32, &stored(&p, 0, 1, 0));
    index.apply(1, &child);
    assert_eq!(index.overlap(&q, 1), 3, "keyed by the engine's hashes");
    assert_eq!(index.targets[&1].namespaced(), 0, "a direct chain keeps no digests");

    let mut named = stored(&p, 1, 3, 0x77);
    let KvEvent::BlockStored { token_ids, .. } = &mut named else { unreachable!() };
    token_ids[..ps].fill(4_242);
    index.apply(2, &stored(&p, 0, 1, 0x77));
    index.apply(2, &named);
    assert_eq!(index.overlap(&q, 2), 1, "rehashed from the tokens, which diverge at page 1");
    let mut other = p.clone();
    other[ps..2 * ps].fill(4_242);
    assert_eq!(index.overlap(&page_hashes(&other, ps), 2), 3);
    assert_eq!(index.targets[&2].namespaced(), 3);
    index.check();
}

/// A commit begun in small parts can be finished with any budget, up to `usize::MAX`.
#[test]
fn a_commit_begun_in_parts_finishes_with_any_budget() {
    let p = prompt(9, 6);
    let events = vec![stored(&p, 0, 6, 0x33), removed(&p, &[5, 4], 0x33)];
    let mut index = PrefixIndex::new(100);
    let mut prepared = index.prepare(1u32, &events);
    assert!(!index.commit_some(1, &mut prepared, 2), "two of eight blocks");
    assert!(index.commit_some(1, &mut prepared, usize::MAX));
    assert!(prepared.is_done());
    assert_eq!(index.overlap(&page_hashes(&p, PS as usize), 1), 4);
    assert_eq!(index.stats().blocks, 4);
    index.check();
}

/// A `cache_salt` chain hashed like SGLang (after the salt's seed) is keyed by its hashes, with no
/// digest kept, and answers only queries of the same salt; one whose hashes are namespaced past
/// that (a LoRA adapter's) is rehashed from its tokens after the same seed.
#[test]
fn a_salted_chain_counts_for_its_salt_alone() {
    let p = prompt(9, 4);
    let mut index = PrefixIndex::new(100);
    index.apply(1u32, &salted_stored(&p, 0, 2, Some("tenant-a"), 0));
    index.apply(1, &salted_stored(&p, 2, 4, Some("tenant-a"), 0));
    assert_eq!(index.overlap(&salted_query(&p, Some("tenant-a")), 1), 4);
    assert_eq!(index.overlap(&salted_query(&p, None), 1), 0, "not an unsalted prompt's");
    assert_eq!(index.overlap(&salted_query(&p, Some("tenant-b")), 1), 0, "nor another salt's");
    assert_eq!(index.targets[&1].namespaced(), 0, "a salted chain hashed like SGLang keeps no digests");

    index.apply(2u32, &salted_stored(&p, 0, 3, Some("tenant-a"), 0x55));
    assert_eq!(index.overlap(&salted_query(&p, Some("tenant-a")), 2), 3);
    assert_eq!(index.overlap(&salted_query(&p, None), 2), 0);
    assert_eq!(index.targets[&2].namespaced(), 3);

    // Without the salt named, the same hashes are a namespace the index cannot compute.
    let mut unnamed = salted_stored(&p, 0, 2, Some("tenant-a"), 0);
    let KvEvent::BlockStored { cache_salt, .. } = &mut unnamed else { unreachable!() };
    *cache_salt = None;
    index.apply(3u32, &unnamed);
    assert_eq!(index.overlap(&salted_query(&p, None), 3), 2, "rehashed from the tokens, unsalted");
    assert_eq!(index.targets[&3].namespaced(), 2);
    let stats = index.stats();
    assert_eq!((stats.blocks, stats.rehashed), (4 + 3 + 2, 3 + 2), "the stats count what was rehashed");
    index.check();
}

/// A LoRA adapter's blocks (their events name `lora_name`; SGLang's hashes are namespaced past
/// any router) are keyed by their tokens after infera's seed for the adapter and its salt: they
/// count for the prompts of the same adapter (and salt) alone, never for the base model's.
#[test]
fn an_adapters_blocks_count_for_its_own_prompts_alone() {
    use crate::hash::namespaced_page_hashes;
    let p = prompt(4, 3);
    let adapter = |from, to, salt: Option<&str>, name: &str| {
        let mut e = salted_stored(&p, from, to, salt, 0x77);
        let KvEvent::BlockStored { lora_name, .. } = &mut e else { unreachable!() };
        *lora_name = Some(name.to_owned());
        e
    };
    let query = |salt, name| namespaced_page_hashes(salt, name, &p, PS as usize);
    let mut index = PrefixIndex::new(100);
    index.apply(1u32, &adapter(0, 2, None, "sql"));
    index.apply(1, &adapter(2, 3, None, "sql"));
    assert_eq!(index.overlap(&query(None, Some("sql")), 1), 3, "its own adapter's prompt");
    assert_eq!(index.overlap(&query(None, None), 1), 0, "not the base model's");
    assert_eq!(index.overlap(&query(None, Some("chat")), 1), 0, "nor another adapter's");
    assert_eq!(index.targets[&1].namespaced(), 3);
    index.apply(2u32, &adapter(0, 2, Some("t"), "sql"));
    assert_eq!(index.overlap(&query(Some("t"), Some("sql")), 2), 2);
    assert_eq!(index.overlap(&query(None, Some("sql")), 2), 0, "a salt splits an adapter's pages too");
    assert_eq!(index.overlap(&query(Some("t"), None), 2), 0);
    // Removed by the engine's hashes, as any namespaced block.
    index.apply(1, &removed(&p, &[2], 0x77));
    assert_eq!(index.overlap(&query(None, Some("sql")), 1), 2);
    index.check();
}

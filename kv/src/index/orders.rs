//! The searched overlap against a naive reference under random event orders: stores of any
//! sub-range (orphans included), removals of any pages in any order (parents before children),
//! namespaced duplicates, engine hashes reused for other tokens, replays, clears and a small
//! budget, applied one event at a time or in batches.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::hash::{ChainDigest, chain_page, page_hashes};

const PS: usize = 2;
const DOCS: u8 = 5;
const PAGES: usize = 8;

/// Documents sharing prefixes: doc d < 4 shares its first `d` pages with doc 0 (so docs 1–3 share
/// page 0 with it); doc 4 shares nothing, so its tokens under another doc's first hash (and
/// another's under its) make a first page whose hash is not its tokens'.
fn doc(d: u8) -> Vec<u32> {
    let shared = if d == 4 { 0 } else { usize::from(d) };
    (0..(PAGES * PS) as u32)
        .map(|i| if (i as usize) < shared * PS { i } else { u32::from(d) * 1000 + i })
        .collect()
}

fn engine(d: u8, salt: i64) -> Vec<i64> {
    page_hashes(&doc(d), PS).into_iter().map(|h| h.0 ^ salt).collect()
}

#[derive(Clone, Debug)]
enum Ev {
    /// Pages `from..to` of doc `d` under `salt`, chained on page `from - 1`; `tokens_of` names
    /// the doc whose tokens it carries (another doc: an engine hash reused for other tokens).
    Store {
        d: u8,
        from: usize,
        to: usize,
        salt: i64,
        tokens_of: u8,
    },
    /// These pages of doc `d` under `salt`, in this order.
    Remove {
        d: u8,
        pages: Vec<usize>,
        salt: i64,
    },
    Clear,
}

fn event(e: &Ev) -> KvEvent {
    match e {
        Ev::Store { d, from, to, salt, tokens_of } => {
            let h = engine(*d, *salt);
            KvEvent::BlockStored {
                block_hashes: h[*from..*to].to_vec(),
                parent_block_hash: from.checked_sub(1).map(|p| h[p]),
                token_ids: doc(*tokens_of)[from * PS..to * PS].iter().map(|&t| u64::from(t)).collect(),
                block_size: PS as u32,
                medium: Medium::Gpu,
                cache_salt: None,
                lora_name: None,
            }
        }
        Ev::Remove { d, pages, salt } => {
            let h = engine(*d, *salt);
            KvEvent::BlockRemoved { block_hashes: pages.iter().map(|&p| h[p]).collect(), medium: Medium::Gpu }
        }
        Ev::Clear => KvEvent::AllBlocksCleared,
    }
}

fn ev() -> impl Strategy<Value = Ev> {
    let salt = prop_oneof![3 => Just(0i64), 1 => Just(0x5a5a_i64)];
    prop_oneof![
        6 => (0..DOCS, 0..PAGES, 1..=PAGES, salt.clone(), 0..10u8).prop_map(|(d, a, b, salt, o)| {
            let (from, to) = if a < b { (a, b) } else { (b - 1, a.max(b)) };
            // Mostly the doc's own tokens; sometimes another doc's under its hashes.
            let tokens_of = if o == 0 { (d + 1) % DOCS } else { d };
            Ev::Store { d, from, to: to.max(from + 1), salt, tokens_of }
        }),
        4 => (0..DOCS, prop::collection::vec(0..PAGES, 1..4), salt).prop_map(|(d, pages, salt)| Ev::Remove { d, pages, salt }),
        1 => Just(Ev::Clear),
    ]
}

/// What the reference keys a block by: the page hash, and the digest to chain on unless the
/// engine's hash is that page hash (then its children are keyed by their own engine hashes).
#[derive(Clone, Copy)]
struct Keyed {
    page: PageHash,
    digest: Option<ChainDigest>,
}

impl Keyed {
    fn of(prior: Option<&Keyed>, h: i64, page: &[u64]) -> Self {
        if prior.is_some_and(|p| p.digest.is_none()) {
            return Keyed { page: PageHash(h), digest: None };
        }
        let d = chain_page(prior.and_then(|p| p.digest.as_ref()), page);
        Keyed { page: d.page_hash(), digest: (d.page_hash().0 != h).then_some(d) }
    }
}

/// The reference: per target, engine hash → what keys it, chained as SGLang hashes (a batch sees
/// its own stores, over budget or not, and its own removals); the overlap is the leading run of
/// the prompt's hashes some recorded block has, page by page.
#[derive(Default)]
struct Model {
    targets: HashMap<u8, HashMap<i64, Keyed>>,
    blocks: usize,
}

impl Model {
    fn batch(&mut self, t: u8, events: &[KvEvent], max: usize) {
        let mut stored: HashMap<i64, Keyed> = HashMap::new();
        let mut removed: HashSet<i64> = HashSet::new();
        let mut cleared = false;
        for e in events {
            match e {
                KvEvent::BlockStored { block_hashes, parent_block_hash, token_ids, block_size, .. } => {
                    let mut prior = match parent_block_hash {
                        None => None,
                        Some(p) => match stored.get(p).copied().or_else(|| {
                            (!cleared && !removed.contains(p))
                                .then(|| self.targets.get(&t).and_then(|m| m.get(p).copied()))
                                .flatten()
                        }) {
                            Some(d) => Some(d),
                            None => continue,
                        },
                    };
                    for (&h, page) in block_hashes.iter().zip(token_ids.chunks(*block_size as usize)) {
                        let d = Keyed::of(prior.as_ref(), h, page);
                        prior = Some(d);
                        stored.insert(h, d);
                        removed.remove(&h);
                        match self.targets.entry(t).or_default().entry(h) {
                            Entry::Occupied(mut e) => {
                                e.insert(d);
                            }
                            Entry::Vacant(e) if self.blocks < max => {
                                e.insert(d);
                                self.blocks += 1;
                            }
                            Entry::Vacant(_) => {}
                        }
                    }
                }
                KvEvent::BlockRemoved { block_hashes, .. } => {
                    for h in block_hashes {
                        stored.remove(h);
                        removed.insert(*h);
                        if self.targets.get_mut(&t).and_then(|m| m.remove(h)).is_some() {
                            self.blocks -= 1;
                        }
                    }
                }
                KvEvent::AllBlocksCleared => {
                    stored.clear();
                    removed.clear();
                    cleared = true;
                    if let Some(m) = self.targets.remove(&t) {
                        self.blocks -= m.len();
                    }
                }
            }
        }
    }

    fn overlap(&self, t: u8, q: &[PageHash]) -> usize {
        let Some(m) = self.targets.get(&t) else { return 0 };
        let held: HashSet<PageHash> = m.values().map(|k| k.page).collect();
        q.iter().take_while(|h| held.contains(h)).count()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Batches of random events on three targets, each event sometimes replayed: after every
    /// batch the bookkeeping is consistent, and every target's overlap with every doc (and with
    /// every shorter prompt of it) and the block count equal the reference's.
    #[test]
    fn the_search_equals_the_leading_run_under_any_order(
        batches in prop::collection::vec(
            (0..3u8, prop::collection::vec((ev(), any::<bool>()), 1..5)),
            1..40,
        ),
        max in prop_oneof![Just(usize::MAX), 4..24usize],
        part in prop_oneof![Just(usize::MAX), 1..4usize],
    ) {
        let mut index = PrefixIndex::new(max);
        let mut model = Model::default();
        for (t, evs) in batches {
            let mut events = Vec::new();
            for (e, replay) in &evs {
                events.push(event(e));
                if *replay {
                    events.push(event(e));
                }
            }
            // Committed whole or in parts of `part` blocks, as control's feed does: the same.
            let mut prepared = index.prepare(t, &events);
            while !index.commit_some(t, &mut prepared, part) {}
            model.batch(t, &events, max);
            index.check();
            prop_assert_eq!(index.stats().blocks, model.blocks);
            for d in 0..DOCS {
                let q = page_hashes(&doc(d), PS);
                for target in 0..3u8 {
                    for len in [q.len(), q.len() / 2, 1] {
                        prop_assert_eq!(
                            index.overlap(&q[..len], target),
                            model.overlap(target, &q[..len]),
                            "doc {} target {} len {}", d, target, len
                        );
                    }
                }
            }
        }
    }
}

//! The prefix index: which target holds which pages, built from KV events, asked how many leading
//! pages of a prompt each candidate already has.
//!
//! Keys are *our* page hashes ([`crate::hash`]), SGLang's chained SHA-256 of the tokens, which the
//! proxy computes from a prompt. An engine that does not namespace publishes exactly those, so a
//! chain whose first page's published hash equals the hash of its tokens is keyed by the engine's
//! hashes from there on, unhashed (SGLang seeds a namespace only at a chain's first page, and every
//! hash covers its whole prefix). A `cache_salt` is such a seed, named on the event: a salted chain
//! is keyed by the salted hashes the proxy computes for a request with that salt, so it matches
//! only that salt's prompts, as in SGLang's radix cache. An engine that namespaces its hashes in
//! ways no router can compute (a LoRA adapter's, `format: "dynamo"`) publishes other hashes for the
//! same tokens: its blocks are keyed by hashing the token ids every
//! `BlockStored` carries, chained on the parent block's digest, and its hashes are kept per target
//! only to find a block again when it is removed or named as a parent. A LoRA adapter's chain
//! (its event names `lora_name`, 0.5.23) starts after infera's seed for the adapter
//! ([`crate::hash::adapter_seed`]), which the proxy hashes the adapter's prompts after: it
//! matches that adapter's prompts alone, not the base model's.
//!
//! A page hash covers every page before it, so "target holds hash `h_i`" means "target holds the
//! first `i + 1` pages"; the overlap of a prompt with a target is the length of the leading run of
//! its hashes the target holds.
//!
//! Only device-resident blocks count (`GPU`, or no medium given): a HiCache host or disk copy is
//! ignored, so an evicted GPU block stops counting even while a slower copy remains.
//!
//! A query costs O(log overlap) probes per target, not one per page: each target's held pages are
//! kept with the shape bookkeeping of [`pages`] (held children per page, pages held without their
//! parent), and while a target's pages are prefix-closed (a radix cache is, once an event is applied)
//! the leading run is found by [`search`]; a target caught mid-eviction (SGLang removes a node's
//! pages parent first) is walked page by page.
//! Either way the answer is the leading run of held pages (`orders` tests it against that
//! definition under random event orders).
//!
//! The index is pure and single-threaded; callers share it behind a read-write lock. Ingest is
//! split so any hashing happens under the read lock ([`PrefixIndex::prepare`]) and only the
//! map updates under the write lock ([`PrefixIndex::commit`]); a query holds the read lock for one
//! prompt. Memory is bounded by a block budget: past it, new blocks are not
//! recorded (counted), which can only under-state an overlap, never invent one.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use crate::event::{EventBatch, KvEvent, Medium};
use crate::hash::{PageHash, namespace_seed};

mod pages;
mod search;

use pages::{Link, Stored, TargetPages};

/// A map keyed by page or block hashes.
type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;
/// A set of block hashes.
type KeySet<K> = HashSet<K, BuildHasherDefault<KeyHasher>>;

/// What [`PrefixIndex::prepare`] computed for one batch, for [`PrefixIndex::commit`].
#[derive(Debug)]
pub struct Prepared {
    ops: Vec<Op>,
    /// The first op not fully committed, and how many of its blocks were.
    next: usize,
    done: usize,
}

impl Prepared {
    /// Whether every op was committed.
    pub fn is_done(&self) -> bool {
        self.next == self.ops.len()
    }
}

#[derive(Debug)]
enum Op {
    /// Blocks (engine hash, what keys it), chained after the page `parent` (`None`: the first page).
    Store {
        parent: Option<PageHash>,
        blocks: Vec<(i64, Link)>,
    },
    Remove(Vec<i64>),
    Clear,
    Orphans(u64),
    OtherMedium,
}

/// The hasher of maps keyed by page and block hashes: the keys are already SHA-256 output, so one
/// multiply spreads them over the buckets; SipHash would be most of a lookup's cost.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_i64(&mut self, v: i64) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Counters of what ingest did; all only grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestCounts {
    /// Blocks recorded.
    pub stored: u64,
    /// Blocks forgotten by `BlockRemoved`.
    pub removed: u64,
    /// `AllBlocksCleared` events (and target resets).
    pub cleared: u64,
    /// Stored blocks whose parent the index does not hold (missed events): not recorded.
    pub orphans: u64,
    /// Removals of blocks the index does not hold.
    pub unknown_removals: u64,
    /// Blocks not recorded because the budget was full.
    pub over_budget: u64,
    /// Events about media other than the GPU pool, ignored.
    pub other_medium: u64,
}

/// Size and counters, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Blocks recorded now, over all targets.
    pub blocks: usize,
    /// Targets with at least one block.
    pub targets: usize,
    /// Bytes the index's maps take (every allocated bucket).
    pub bytes: usize,
    /// Of `blocks`, those keyed by hashing their tokens, with a digest kept: an engine whose
    /// hashes no router can compute (a LoRA adapter's namespace, `format: "dynamo"`).
    pub rehashed: usize,
    /// The block budget.
    pub max_blocks: usize,
    /// What ingest did so far.
    pub counts: IngestCounts,
}

/// The prefix index over targets named by `K` (a caller's dense, copyable key).
#[derive(Debug)]
pub struct PrefixIndex<K> {
    /// Per target: the pages it holds and the engine blocks behind them.
    targets: HashMap<K, TargetPages>,
    blocks: usize,
    max_blocks: usize,
    counts: IngestCounts,
}

impl<K: Copy + Eq + Hash> PrefixIndex<K> {
    /// An empty index that records at most `max_blocks` blocks.
    pub fn new(max_blocks: usize) -> Self {
        Self { targets: HashMap::new(), blocks: 0, max_blocks, counts: IngestCounts::default() }
    }

    /// Applies one batch of a target's events, in order.
    pub fn apply_batch(&mut self, target: K, batch: &EventBatch) {
        let prepared = self.prepare(target, &batch.events);
        self.commit(target, prepared);
    }

    /// Applies one event of a target.
    pub fn apply(&mut self, target: K, event: &KvEvent) {
        let prepared = self.prepare(target, std::slice::from_ref(event));
        self.commit(target, prepared);
    }

    /// The read half of ingest: hashes every stored page of `events` (the expensive part), so a
    /// caller sharing the index can do it under a read lock and take the write lock only for
    /// [`Self::commit`]. Nothing may change `target`'s blocks in between (one ingesting task).
    pub fn prepare(&self, target: K, events: &[KvEvent]) -> Prepared {
        let held = self.targets.get(&target);
        // Only a later event of the batch can name a block of this one as its parent, so the last
        // event's blocks are not recorded here, and the map is sized once for the rest.
        let named: usize = events[..events.len().saturating_sub(1)]
            .iter()
            .map(|e| match e {
                KvEvent::BlockStored { block_hashes, medium: Medium::Gpu, .. } => block_hashes.len(),
                _ => 0,
            })
            .sum();
        // What this batch did so far, over what the index held before it.
        let mut stored: KeyMap<i64, Link> = KeyMap::default();
        stored.reserve(named);
        let mut removed: KeySet<i64> = KeySet::default();
        let mut cleared = false;
        let mut ops = Vec::with_capacity(events.len());
        for (i, event) in events.iter().enumerate() {
            let last = i + 1 == events.len();
            match event {
                KvEvent::BlockStored { medium, .. } | KvEvent::BlockRemoved { medium, .. }
                    if *medium != Medium::Gpu =>
                {
                    ops.push(Op::OtherMedium);
                }
                KvEvent::BlockStored {
                    block_hashes,
                    parent_block_hash,
                    token_ids,
                    block_size,
                    cache_salt,
                    lora_name,
                    ..
                } => {
                    let parent = parent_block_hash.map(|p| {
                        stored.get(&p).copied().or_else(|| {
                            (!cleared && !removed.contains(&p))
                                .then(|| held.and_then(|b| b.link(p)))
                                .flatten()
                        })
                    });
                    let mut prior = match parent {
                        None => None,
                        Some(Some(d)) => Some(d),
                        Some(None) => {
                            ops.push(Op::Orphans(block_hashes.len() as u64));
                            continue;
                        }
                    };
                    let first_parent = prior.map(|l| l.page());
                    // A salted chain's first page is hashed after the salt's seed, an adapter's
                    // after infera's seed for the adapter (SGLang's needs its engine-internal
                    // id); below a parent the chain goes on from the parent's link.
                    let seed = match first_parent {
                        None => namespace_seed(cache_salt.as_deref(), lora_name.as_deref()),
                        Some(_) => None,
                    };
                    let mut pages = token_ids.chunks((*block_size).max(1) as usize);
                    let mut blocks = Vec::with_capacity(block_hashes.len());
                    let mut short = false;
                    for &h in block_hashes {
                        // Fewer token pages than hashes: malformed; what is left cannot be keyed.
                        let Some(page) = pages.next() else {
                            short = true;
                            break;
                        };
                        let link = Link::of_block(prior.as_ref(), seed.as_ref(), h, page);
                        prior = Some(link);
                        if !last {
                            stored.insert(h, link);
                        }
                        removed.remove(&h);
                        blocks.push((h, link));
                    }
                    if short {
                        ops.push(Op::Orphans(1));
                    }
                    ops.push(Op::Store { parent: first_parent, blocks });
                }
                KvEvent::BlockRemoved { block_hashes, .. } => {
                    for h in block_hashes {
                        stored.remove(h);
                        removed.insert(*h);
                    }
                    ops.push(Op::Remove(block_hashes.clone()));
                }
                KvEvent::AllBlocksCleared => {
                    stored.clear();
                    removed.clear();
                    cleared = true;
                    ops.push(Op::Clear);
                }
            }
        }
        Prepared { ops, next: 0, done: 0 }
    }

    /// The write half of ingest: records what [`Self::prepare`] computed for `target`.
    pub fn commit(&mut self, target: K, mut prepared: Prepared) {
        self.commit_some(target, &mut prepared, usize::MAX);
    }

    /// Commits the next `max_blocks` blocks of `prepared` (at least one op; an op without blocks
    /// counts as one) and returns whether all is committed. Committing in parts equals committing
    /// the whole, and a caller that takes the write lock per part holds lookups off for one part at
    /// a time. Between parts a lookup sees a store's first pages without the rest, or a removal
    /// half done, both states the index handles (a store runs parents first; a removal may break
    /// the held set's shape, which is tracked).
    pub fn commit_some(&mut self, target: K, prepared: &mut Prepared, max_blocks: usize) -> bool {
        let mut budget = max_blocks.max(1);
        while budget > 0 && !prepared.is_done() {
            let from = prepared.done;
            // Blocks this op has, and how many this part took.
            let (len, taken) = match &prepared.ops[prepared.next] {
                Op::Store { parent, blocks } => {
                    let to = blocks.len().min(from.saturating_add(budget));
                    // A later part chains on the page the previous one ended with.
                    let parent = if from == 0 { *parent } else { Some(blocks[from - 1].1.page()) };
                    self.store(target, parent, &blocks[from..to]);
                    (blocks.len(), to - from)
                }
                Op::Remove(hashes) => {
                    let to = hashes.len().min(from.saturating_add(budget));
                    for &h in &hashes[from..to] {
                        self.remove_block(target, h);
                    }
                    (hashes.len(), to - from)
                }
                Op::Clear => {
                    self.clear_target(target);
                    (0, 0)
                }
                Op::Orphans(n) => {
                    self.counts.orphans += n;
                    (0, 0)
                }
                Op::OtherMedium => {
                    self.counts.other_medium += 1;
                    (0, 0)
                }
            };
            budget = budget.saturating_sub(taken.max(1));
            prepared.done += taken;
            if prepared.done >= len {
                prepared.next += 1;
                prepared.done = 0;
            }
        }
        prepared.is_done()
    }

    /// Forgets everything a target holds (cache reset, lost events, the worker left).
    pub fn clear_target(&mut self, target: K) {
        self.counts.cleared += 1;
        if let Some(pages) = self.targets.remove(&target) {
            self.blocks -= pages.blocks();
        }
    }

    /// Leading pages of `hashes` that `target` holds.
    pub fn overlap(&self, hashes: &[PageHash], target: K) -> usize {
        self.targets.get(&target).map_or(0, |t| t.overlap(hashes))
    }

    /// Leading pages of `hashes` each of `targets` holds, into `out` (same order as `targets`).
    pub fn overlaps(&self, hashes: &[PageHash], targets: &[K], out: &mut Vec<u32>) {
        out.clear();
        // A prompt has far fewer than u32::MAX pages.
        out.extend(targets.iter().map(|t| self.overlap(hashes, *t) as u32));
    }

    /// Size and counters.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            blocks: self.blocks,
            targets: self.targets.values().filter(|t| t.blocks() > 0).count(),
            bytes: self.targets.values().map(TargetPages::bytes).sum(),
            rehashed: self.targets.values().map(TargetPages::namespaced).sum(),
            max_blocks: self.max_blocks,
            counts: self.counts,
        }
    }

    fn store(&mut self, target: K, parent: Option<PageHash>, blocks: &[(i64, Link)]) {
        let pages = self.targets.entry(target).or_default();
        let mut parent = parent;
        for &(h, link) in blocks {
            match pages.store(h, &link, parent, self.blocks < self.max_blocks) {
                Stored::New => {
                    self.blocks += 1;
                    self.counts.stored += 1;
                }
                Stored::Again => {}
                Stored::OverBudget => self.counts.over_budget += 1,
            }
            parent = Some(link.page());
        }
    }

    fn remove_block(&mut self, target: K, engine_hash: i64) {
        if self.targets.get_mut(&target).is_some_and(|t| t.remove(engine_hash)) {
            self.blocks -= 1;
            self.counts.removed += 1;
        } else {
            self.counts.unknown_removals += 1;
        }
    }

    /// Checks every target's bookkeeping against its maps (tests).
    #[cfg(test)]
    fn check(&self) {
        for t in self.targets.values() {
            t.check();
        }
        assert_eq!(self.blocks, self.targets.values().map(TargetPages::blocks).sum::<usize>());
    }
}

#[cfg(test)]
mod orders;
#[cfg(test)]
mod tests;

//! One target's pages: which page hashes it holds, with what it needs to chain on them and to keep
//! the held set's shape known.
//!
//! SGLang's radix cache is prefix-closed per rank (eviction takes leaves first), so a target that
//! holds page `i` of a prompt holds pages `0..i` too, and the longest held prefix can be found by a
//! search with O(log n) probes instead of one probe per page. The event stream does not guarantee
//! that shape at every moment: SGLang removes a node's pages in one `BlockRemoved`, parent first
//! (`mem_cache/radix_cache.py`, `_record_remove_event`), and a batch can store a child after its
//! parent went over budget. So the shape is *tracked*, not assumed: every page keeps the number of
//! its held children, and the target counts its `broken` pages (held, with a parent it does not
//! hold). While that count is zero the held set is prefix-closed and [`TargetPages::overlap`]
//! searches; otherwise it walks the prompt page by page. Both give the leading run of held pages.
//!
//! Blocks are found by the engine's hash. An engine that does not namespace publishes our page hash
//! itself, so such a block is recorded as a flag on its page (`direct`) and costs no second map,
//! and its children chain on that hash alone ([`Link::Direct`]): the page keeps no digest. A
//! namespaced block's hash maps, in `aliases`, to its page and the rest of its digest, which that
//! block's children chain on.

use super::KeyMap;
use crate::hash::{ChainDigest, PageHash, chain_page};

/// The block is recorded under its own page hash.
const DIRECT: u32 = 1 << 31;
/// The page is the first of its sequence (no parent).
const ROOT: u32 = 1 << 30;
/// Namespaced blocks mapping to the page.
const ALIASES: u32 = ROOT - 1;

/// One page a target holds, or held and still has held children under.
#[derive(Clone, Copy, Debug)]
pub(super) struct Page {
    /// The page before this one (meaningless with `ROOT`).
    parent: PageHash,
    /// `DIRECT`, `ROOT` and the alias count.
    flags: u32,
    /// Children pages this target holds.
    children: u32,
}

impl Page {
    const EMPTY: Self = Self { parent: PageHash(0), flags: 0, children: 0 };

    fn blocks(&self) -> u32 {
        (self.flags & ALIASES) + u32::from(self.flags & DIRECT != 0)
    }

    fn held(&self) -> bool {
        self.blocks() > 0
    }

    fn parent(&self) -> Option<PageHash> {
        (self.flags & ROOT == 0).then_some(self.parent)
    }
}

/// What a stored block is keyed by, and what the blocks stored under it chain on.
#[derive(Clone, Copy, Debug)]
pub(super) enum Link {
    /// The engine hashes this chain as SGLang does without a namespace: the block's hash is its
    /// page hash, and so are its children's (each covers its whole prefix, so a chain whose hash
    /// matched once stays SGLang's: `mem_cache/utils.py` seeds a namespace only at a chain's
    /// first page and SGLang refuses paths with mixed namespaces). This trusts the engine to keep
    /// hashing like SGLang below a first page that did: a stream that publishes, under a direct
    /// parent, a hash that is not SGLang's for the tokens it carries (SGLang never does) is keyed
    /// as published, and the search may then credit a page the target does not hold.
    Direct(PageHash),
    /// A namespaced block (or one whose hash is not SGLang's): keyed by the digest of its tokens.
    Namespaced(ChainDigest),
}

impl Link {
    /// The link of block `engine_hash` with tokens `page`, stored under `prior` (`None`: the first
    /// page of a sequence, hashed after `seed`, its `cache_salt`'s). Under a direct parent the
    /// engine's hash is taken as the page hash, unhashed; otherwise the tokens are hashed and the
    /// block is direct if that is its hash.
    pub(super) fn of_block(
        prior: Option<&Link>,
        seed: Option<&ChainDigest>,
        engine_hash: i64,
        page: &[u64],
    ) -> Self {
        let digest = match prior {
            Some(Link::Direct(_)) => return Link::Direct(PageHash(engine_hash)),
            Some(Link::Namespaced(d)) => chain_page(Some(d), page),
            None => chain_page(seed, page),
        };
        if digest.page_hash().0 == engine_hash {
            Link::Direct(digest.page_hash())
        } else {
            Link::Namespaced(digest)
        }
    }

    /// The page the block is keyed by.
    pub(super) fn page(&self) -> PageHash {
        match self {
            Link::Direct(p) => *p,
            Link::Namespaced(d) => d.page_hash(),
        }
    }
}

/// A namespaced block: its page, and bytes 8..32 of its digest (the first 8 are the page hash).
#[derive(Clone, Copy, Debug)]
struct Alias {
    page: PageHash,
    tail: [u8; 24],
}

impl Alias {
    fn of(digest: &ChainDigest) -> Self {
        let mut tail = [0u8; 24];
        tail.copy_from_slice(&digest.0[8..]);
        Self { page: digest.page_hash(), tail }
    }

    fn digest(&self) -> ChainDigest {
        let mut d = [0u8; 32];
        d[..8].copy_from_slice(&self.page.0.to_be_bytes());
        d[8..].copy_from_slice(&self.tail);
        ChainDigest(d)
    }
}

/// How a block is found from its engine hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Direct,
    Alias,
}

/// What storing one block did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stored {
    /// A new block.
    New,
    /// The engine hash was known: same page (a replay) or moved to another page.
    Again,
    /// A new block, not recorded: the budget is full.
    OverBudget,
}

/// One target's pages and blocks.
#[derive(Debug, Default)]
pub(super) struct TargetPages {
    pages: KeyMap<PageHash, Page>,
    /// Namespaced engine hash → its page and digest.
    aliases: KeyMap<i64, Alias>,
    /// Held pages whose parent page this target does not hold.
    broken: usize,
    /// Blocks recorded.
    blocks: usize,
}

impl TargetPages {
    /// Blocks recorded.
    pub(super) fn blocks(&self) -> usize {
        self.blocks
    }

    /// Bytes the maps take: every bucket they allocated, with its control byte.
    pub(super) fn bytes(&self) -> usize {
        let page = std::mem::size_of::<(PageHash, Page)>() + 1;
        let alias = std::mem::size_of::<(i64, Alias)>() + 1;
        self.pages.capacity() * page + self.aliases.capacity() * alias
    }

    /// What a block stored under the block the engine calls `engine_hash` chains on, if recorded.
    pub(super) fn link(&self, engine_hash: i64) -> Option<Link> {
        if let Some(a) = self.aliases.get(&engine_hash) {
            return Some(Link::Namespaced(a.digest()));
        }
        self.direct(engine_hash).map(Link::Direct)
    }

    /// Whether this target holds `page`.
    pub(super) fn holds(&self, page: &PageHash) -> bool {
        self.pages.get(page).is_some_and(Page::held)
    }

    /// Records block `engine_hash` keyed by `link`, chained after the page `parent` (`None`: the
    /// first page); `room` says whether the budget admits a new block.
    pub(super) fn store(
        &mut self,
        engine_hash: i64,
        link: &Link,
        parent: Option<PageHash>,
        room: bool,
    ) -> Stored {
        let page = link.page();
        match self.find(engine_hash) {
            Some((old, _)) if old == page => return Stored::Again,
            Some((old, via)) => {
                // The same engine block with other tokens: it moves.
                self.unref(engine_hash, old, via);
                self.reference(engine_hash, link, parent);
                return Stored::Again;
            }
            None if !room => return Stored::OverBudget,
            None => {}
        }
        self.reference(engine_hash, link, parent);
        self.blocks += 1;
        Stored::New
    }

    /// Forgets block `engine_hash`; `false` when it was not recorded.
    pub(super) fn remove(&mut self, engine_hash: i64) -> bool {
        let Some((page, via)) = self.find(engine_hash) else { return false };
        self.unref(engine_hash, page, via);
        self.blocks -= 1;
        true
    }

    /// Leading pages of `hashes` this target holds.
    pub(super) fn overlap(&self, hashes: &[PageHash]) -> usize {
        if self.broken > 0 {
            return hashes.iter().take_while(|h| self.holds(h)).count();
        }
        super::search::leading_run(hashes.len(), |i| self.holds(&hashes[i]))
    }

    fn find(&self, engine_hash: i64) -> Option<(PageHash, Via)> {
        if let Some(a) = self.aliases.get(&engine_hash) {
            return Some((a.page, Via::Alias));
        }
        self.direct(engine_hash).map(|page| (page, Via::Direct))
    }

    /// The page of `engine_hash` if a block is recorded under it directly.
    fn direct(&self, engine_hash: i64) -> Option<PageHash> {
        let page = PageHash(engine_hash);
        self.pages.get(&page).is_some_and(|p| p.flags & DIRECT != 0).then_some(page)
    }

    fn reference(&mut self, engine_hash: i64, link: &Link, parent: Option<PageHash>) {
        let page = link.page();
        let p = self.pages.entry(page).or_insert(Page::EMPTY);
        let was_held = p.held();
        match link {
            Link::Direct(_) => {
                debug_assert_eq!(engine_hash, page.0, "a direct block is keyed by its own hash");
                p.flags |= DIRECT;
            }
            Link::Namespaced(digest) => {
                self.aliases.insert(engine_hash, Alias::of(digest));
                p.flags += 1;
            }
        }
        if was_held {
            return;
        }
        match parent {
            Some(q) => {
                p.parent = q;
                p.flags &= !ROOT;
            }
            None => p.flags |= ROOT,
        }
        // Its held children were broken while it was not held.
        self.broken -= p.children as usize;
        if let Some(q) = parent {
            let q = self.pages.entry(q).or_insert(Page::EMPTY);
            q.children += 1;
            if !q.held() {
                self.broken += 1;
            }
        }
    }

    fn unref(&mut self, engine_hash: i64, page: PageHash, via: Via) {
        let Some(p) = self.pages.get_mut(&page) else { return };
        match via {
            Via::Direct => p.flags &= !DIRECT,
            Via::Alias => {
                self.aliases.remove(&engine_hash);
                p.flags -= 1;
            }
        }
        if p.held() {
            return;
        }
        let (parent, children) = (p.parent(), p.children);
        self.broken += children as usize;
        if children == 0 {
            self.pages.remove(&page);
        }
        if let Some(q) = parent
            && let Some(qp) = self.pages.get_mut(&q)
        {
            qp.children -= 1;
            if !qp.held() {
                // This page was broken; it is no longer held.
                self.broken -= 1;
                if qp.children == 0 {
                    self.pages.remove(&q);
                }
            }
        }
    }

    /// Namespaced blocks recorded, each with its digest.
    pub(super) fn namespaced(&self) -> usize {
        self.aliases.len()
    }

    /// Recomputes `broken`, the children counts and the block count from the maps (tests).
    #[cfg(test)]
    pub(super) fn check(&self) {
        let mut children: KeyMap<PageHash, u32> = KeyMap::default();
        let mut broken = 0;
        let mut blocks = 0;
        for p in self.pages.values().filter(|p| p.held()) {
            blocks += p.blocks() as usize;
            if let Some(q) = p.parent() {
                *children.entry(q).or_default() += 1;
                if !self.holds(&q) {
                    broken += 1;
                }
            }
        }
        for (h, p) in &self.pages {
            assert_eq!(p.children, children.get(h).copied().unwrap_or(0), "children of {h:?}");
            assert!(p.held() || p.children > 0, "an empty page outlived its children");
        }
        let aliased: usize = self.pages.values().map(|p| (p.flags & ALIASES) as usize).sum();
        assert_eq!(aliased, self.aliases.len());
        assert_eq!(broken, self.broken, "broken pages");
        assert_eq!(blocks, self.blocks, "blocks");
    }
}

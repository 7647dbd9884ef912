//! One DP rank's prefix cache: pages of `--page-size` tokens keyed by SGLang's page hash
//! ([`infera_kv::hash`], the keys SGLang publishes and control's index is queried with),
//! evicted least recently used once the token capacity is exceeded.
//!
//! A prompt's pages are touched last page first, so the root of a path is always the most
//! recently used: eviction takes the deepest pages of the oldest paths first, as a radix
//! cache evicts leaves first. Every change can be described as SGLang's KV events
//! ([`Inserted::events`]): `BlockStored` for new pages, chained on the page before them, and
//! `BlockRemoved` for evicted ones.

use std::collections::{BTreeMap, HashMap};

use infera_kv::event::{KvEvent, Medium};
use infera_kv::hash::{self, PageHash};
use infera_kv::wire::{MAX_HASHES_PER_EVENT, MAX_TOKENS_PER_EVENT};

/// A prompt as the prefix cache sees it: the hashes of its full pages and, when KV events are
/// published, their tokens. A salted prompt's pages are hashed after its salt's seed, as SGLang's
/// KV events hash them, so they are a namespace of their own in the cache too.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptPages {
    /// SGLang's hash of each full page, in order.
    pub hashes: Vec<PageHash>,
    /// The tokens of those pages (empty when KV events are off).
    pub tokens: Vec<u32>,
    /// Tokens per page.
    pub page_size: u32,
    /// The request's `cache_salt`, named on the `BlockStored` events.
    pub cache_salt: Option<String>,
}

impl PromptPages {
    /// The full pages of `prompt` under `cache_salt`; `with_tokens` keeps their tokens for KV
    /// events.
    pub fn new(prompt: &[u32], page_size: u32, with_tokens: bool, cache_salt: Option<&str>) -> Self {
        let page_size = page_size.max(1);
        let hashes = hash::salted_page_hashes(cache_salt, prompt, page_size as usize);
        let tokens =
            if with_tokens { prompt[..hashes.len() * page_size as usize].to_vec() } else { Vec::new() };
        Self { hashes, tokens, page_size, cache_salt: cache_salt.map(str::to_owned) }
    }
}

/// What one [`PrefixCache::insert`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inserted {
    /// Positions (in the prompt's pages) of the pages newly stored, ascending.
    pub new: Vec<usize>,
    /// Pages evicted to make room (possibly some just stored), oldest first.
    pub evicted: Vec<PageHash>,
}

impl Inserted {
    /// The change as SGLang's KV events: one `BlockStored` per run of consecutive new pages
    /// (split to stay within the wire caps, each part chained on the page before it), then one
    /// `BlockRemoved` for the evicted pages. Needs `pages` built `with_tokens`.
    pub fn events(&self, pages: &PromptPages) -> Vec<KvEvent> {
        let size = pages.page_size.max(1) as usize;
        let per_event = MAX_HASHES_PER_EVENT.min(MAX_TOKENS_PER_EVENT / size).max(1);
        let mut events = Vec::new();
        let mut at = 0;
        while at < self.new.len() {
            let mut end = at + 1;
            while end < self.new.len() && self.new[end] == self.new[end - 1] + 1 && end - at < per_event {
                end += 1;
            }
            let (first, last) = (self.new[at], self.new[end - 1] + 1);
            let tokens = pages.tokens.get(first * size..last * size).unwrap_or_default();
            events.push(KvEvent::BlockStored {
                block_hashes: pages.hashes[first..last].iter().map(|h| h.0).collect(),
                parent_block_hash: first.checked_sub(1).map(|p| pages.hashes[p].0),
                token_ids: tokens.iter().map(|&t| u64::from(t)).collect(),
                block_size: pages.page_size,
                medium: Medium::Gpu,
                cache_salt: pages.cache_salt.clone(),
                lora_name: None,
            });
            at = end;
        }
        for chunk in self.evicted.chunks(MAX_HASHES_PER_EVENT) {
            let block_hashes = chunk.iter().map(|h| h.0).collect();
            events.push(KvEvent::BlockRemoved { block_hashes, medium: Medium::Gpu });
        }
        events
    }
}

/// LRU set of page hashes with a token capacity.
#[derive(Debug, Clone)]
pub struct PrefixCache {
    page_size: u32,
    capacity_pages: usize,
    /// page hash → last-use tick.
    pages: HashMap<PageHash, u64>,
    /// last-use tick → page hash (the eviction order).
    order: BTreeMap<u64, PageHash>,
    tick: u64,
}

impl PrefixCache {
    /// An empty cache holding at most `capacity_tokens` tokens in pages of `page_size`.
    pub fn new(page_size: u32, capacity_tokens: u64) -> Self {
        let page_size = page_size.max(1);
        let capacity_pages = usize::try_from(capacity_tokens / u64::from(page_size)).unwrap_or(usize::MAX);
        Self { page_size, capacity_pages, pages: HashMap::new(), order: BTreeMap::new(), tick: 0 }
    }

    /// Tokens of the longest cached prefix of a prompt with these page hashes.
    pub fn cached_tokens(&self, hashes: &[PageHash]) -> u64 {
        let pages = hashes.iter().take_while(|h| self.pages.contains_key(h)).count();
        pages as u64 * u64::from(self.page_size)
    }

    /// Records a prefilled prompt's pages as most recently used, evicting as needed.
    pub fn insert(&mut self, hashes: &[PageHash]) -> Inserted {
        let mut out = Inserted::default();
        for (i, &hash) in hashes.iter().enumerate().rev() {
            self.tick += 1;
            match self.pages.insert(hash, self.tick) {
                Some(old) => {
                    self.order.remove(&old);
                }
                None => out.new.push(i),
            }
            self.order.insert(self.tick, hash);
        }
        out.new.reverse();
        while self.pages.len() > self.capacity_pages {
            let Some((_, hash)) = self.order.pop_first() else { break };
            self.pages.remove(&hash);
            out.evicted.push(hash);
        }
        out
    }

    /// Forgets everything (`/flush_cache`).
    pub fn clear(&mut self) {
        self.pages.clear();
        self.order.clear();
    }

    /// Tokens held.
    pub fn tokens(&self) -> u64 {
        self.pages.len() as u64 * u64::from(self.page_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: &[i64]) -> Vec<PageHash> {
        v.iter().map(|&x| PageHash(x)).collect()
    }

    #[test]
    fn a_shared_prefix_is_a_hit_up_to_the_first_miss() {
        let mut c = PrefixCache::new(4, 1000);
        c.insert(&h(&[1, 2, 3]));
        assert_eq!(c.cached_tokens(&h(&[1, 2, 3, 4])), 12);
        assert_eq!(c.cached_tokens(&h(&[1, 9, 3])), 4);
        assert_eq!(c.cached_tokens(&h(&[9, 2])), 0);
        c.clear();
        assert_eq!(c.cached_tokens(&h(&[1])), 0);
    }

    #[test]
    fn eviction_takes_the_deepest_pages_of_the_oldest_path() {
        let mut c = PrefixCache::new(1, 4);
        c.insert(&h(&[1, 2, 3]));
        let ins = c.insert(&h(&[10, 11]));
        assert_eq!(ins, Inserted { new: vec![0, 1], evicted: h(&[3]) });
        assert_eq!(c.tokens(), 4);
        assert_eq!(c.cached_tokens(&h(&[1, 2, 3])), 2, "page 3 went first");
        assert_eq!(c.cached_tokens(&h(&[10, 11])), 2);
        assert_eq!(c.insert(&h(&[1, 2])), Inserted::default(), "nothing new, nothing evicted");
        c.insert(&h(&[20]));
        assert_eq!(c.cached_tokens(&h(&[1, 2])), 2, "re-used path survives");
        assert_eq!(c.cached_tokens(&h(&[10, 11])), 1);
    }

    #[test]
    fn changes_become_chained_sglang_events() {
        let prompt: Vec<u32> = (0..7).collect();
        let pages = PromptPages::new(&prompt, 2, true, None);
        assert_eq!(pages.hashes, hash::page_hashes(&prompt, 2));
        assert_eq!(pages.tokens, &prompt[..6]);
        let ins = Inserted { new: vec![1, 2], evicted: h(&[5]) };
        assert_eq!(
            ins.events(&pages),
            [
                KvEvent::BlockStored {
                    block_hashes: vec![pages.hashes[1].0, pages.hashes[2].0],
                    parent_block_hash: Some(pages.hashes[0].0),
                    token_ids: vec![2, 3, 4, 5],
                    block_size: 2,
                    medium: Medium::Gpu,
                    cache_salt: None,
                    lora_name: None,
                },
                KvEvent::BlockRemoved { block_hashes: vec![5], medium: Medium::Gpu },
            ]
        );
        let first = Inserted { new: vec![0, 2], evicted: vec![] }.events(&pages);
        assert!(matches!(&first[0], KvEvent::BlockStored { parent_block_hash: None, .. }));
        assert!(
            matches!(&first[1], KvEvent::BlockStored { parent_block_hash: Some(p), .. } if *p == pages.hashes[1].0)
        );
    }

    #[test]
    fn a_salted_prompt_is_a_namespace_of_its_own() {
        let prompt: Vec<u32> = (0..4).collect();
        let plain = PromptPages::new(&prompt, 2, true, None);
        let salted = PromptPages::new(&prompt, 2, true, Some("tenant-a"));
        assert_eq!(salted.hashes, hash::salted_page_hashes(Some("tenant-a"), &prompt, 2));
        let mut c = PrefixCache::new(2, 100);
        c.insert(&plain.hashes);
        assert_eq!(c.cached_tokens(&salted.hashes), 0, "the salted prompt shares nothing with the plain one");
        let ins = c.insert(&salted.hashes);
        assert_eq!(ins.new, [0, 1], "both pages are new");
        let events = ins.events(&salted);
        assert!(matches!(&events[..], [KvEvent::BlockStored { cache_salt: Some(s), block_hashes, .. }]
                if s == "tenant-a" && block_hashes == &[salted.hashes[0].0, salted.hashes[1].0]));
        assert_eq!(c.cached_tokens(&salted.hashes), 4);
    }
}

//! One DP rank's prefix cache: pages of `--page-size` tokens keyed by chained page hashes,
//! evicted least recently used once the token capacity is exceeded.
//!
//! A prompt's pages are touched last page first, so the root of a path is always the most
//! recently used: eviction takes the deepest pages of the oldest paths first, as a radix
//! cache evicts leaves first.

use std::collections::{BTreeMap, HashMap};

/// LRU set of page hashes with a token capacity.
#[derive(Debug, Clone)]
pub struct PrefixCache {
    page_size: u32,
    capacity_pages: usize,
    /// page hash → last-use tick.
    pages: HashMap<u64, u64>,
    /// last-use tick → page hash (the eviction order).
    order: BTreeMap<u64, u64>,
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
    pub fn cached_tokens(&self, hashes: &[u64]) -> u64 {
        let pages = hashes.iter().take_while(|h| self.pages.contains_key(h)).count();
        pages as u64 * u64::from(self.page_size)
    }

    /// Records a prefilled prompt's pages as most recently used, evicting as needed.
    pub fn insert(&mut self, hashes: &[u64]) {
        for &hash in hashes.iter().rev() {
            self.tick += 1;
            if let Some(old) = self.pages.insert(hash, self.tick) {
                self.order.remove(&old);
            }
            self.order.insert(self.tick, hash);
        }
        while self.pages.len() > self.capacity_pages {
            let Some((_, hash)) = self.order.pop_first() else { break };
            self.pages.remove(&hash);
        }
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

    #[test]
    fn a_shared_prefix_is_a_hit_up_to_the_first_miss() {
        let mut c = PrefixCache::new(4, 1000);
        c.insert(&[1, 2, 3]);
        assert_eq!(c.cached_tokens(&[1, 2, 3, 4]), 12);
        assert_eq!(c.cached_tokens(&[1, 9, 3]), 4);
        assert_eq!(c.cached_tokens(&[9, 2]), 0);
        c.clear();
        assert_eq!(c.cached_tokens(&[1]), 0);
    }

    #[test]
    fn eviction_takes_the_deepest_pages_of_the_oldest_path() {
        let mut c = PrefixCache::new(1, 4);
        c.insert(&[1, 2, 3]);
        c.insert(&[10, 11]);
        assert_eq!(c.tokens(), 4);
        assert_eq!(c.cached_tokens(&[1, 2, 3]), 2, "page 3 went first");
        assert_eq!(c.cached_tokens(&[10, 11]), 2);
        c.insert(&[1, 2]);
        c.insert(&[20]);
        assert_eq!(c.cached_tokens(&[1, 2]), 2, "re-used path survives");
        assert_eq!(c.cached_tokens(&[10, 11]), 1);
    }
}

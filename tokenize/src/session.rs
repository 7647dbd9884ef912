//! The session cache: per session key, the last rendered chat prompt, its token ids and its cut
//! points, in a least-recently-used map bounded in bytes. A new turn usually renders the old
//! prompt followed by the answer and the new message; the ids before the last cut point inside
//! the common text are reused and only the rest is encoded ([`crate::boundary`] says why that
//! is exact).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::boundary::Cut;

/// Fixed bytes counted per entry on top of its text, ids and cuts (map slots, key, headers).
const ENTRY_OVERHEAD: usize = 128;

/// Counters of the session cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Turns that reused token ids of an earlier turn.
    pub hits: u64,
    /// Turns of a session that had to be encoded whole (first turn, evicted, or diverged).
    pub misses: u64,
    /// Token ids reused over all hits.
    pub reused_tokens: u64,
    /// Sessions held.
    pub entries: usize,
    /// Bytes held (text, ids, cuts and a fixed overhead per entry).
    pub bytes: usize,
    /// The bound on `bytes`.
    pub capacity_bytes: usize,
}

#[derive(Debug)]
struct Entry {
    text: String,
    ids: Arc<[u32]>,
    cuts: Vec<Cut>,
    tick: u64,
    /// The tokenizer's cache generation when the ids were made; only the current one is lent.
    generation: u64,
}

impl Entry {
    fn bytes(&self, key: &str) -> usize {
        ENTRY_OVERHEAD + key.len() + self.text.len() + self.ids.len() * 4 + self.cuts.len() * size_of::<Cut>()
    }
}

/// What an earlier turn lends to a new prompt: the ids and cuts before byte `start`.
#[derive(Debug)]
pub(crate) struct Reuse {
    pub(crate) start: usize,
    pub(crate) ids: Vec<u32>,
    pub(crate) cuts: Vec<Cut>,
}

/// Bounded LRU of sessions.
#[derive(Debug)]
pub(crate) struct SessionCache {
    entries: HashMap<String, Entry>,
    by_age: BTreeMap<u64, String>,
    tick: u64,
    stats: CacheStats,
}

impl SessionCache {
    /// An empty cache holding at most `capacity_bytes`.
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        let stats = CacheStats { capacity_bytes, ..CacheStats::default() };
        Self { entries: HashMap::new(), by_age: BTreeMap::new(), tick: 0, stats }
    }

    /// The part of `text` an earlier turn of `session` already encoded in `generation`, counted
    /// as a hit or miss.
    pub(crate) fn lookup(&mut self, session: &str, text: &str, generation: u64) -> Option<Reuse> {
        let reuse = self.entries.get(session).filter(|e| e.generation == generation).and_then(|entry| {
            let common = common_prefix(&entry.text, text);
            // The last cut whose token lies inside the common text, past the start.
            let k = entry.cuts.partition_point(|c| c.end <= common);
            let cut = entry.cuts[..k].iter().rposition(|c| c.start > 0)?;
            let c = entry.cuts[cut];
            Some(Reuse {
                start: c.start,
                ids: entry.ids[..c.index].to_vec(),
                cuts: entry.cuts[..cut].to_vec(),
            })
        });
        match &reuse {
            Some(r) => {
                self.stats.hits += 1;
                self.stats.reused_tokens += r.ids.len() as u64;
            }
            None => self.stats.misses += 1,
        }
        reuse
    }

    /// Remembers the newest prompt of `session`, evicting the least recently used sessions past
    /// the byte bound (a prompt larger than the whole bound is not kept).
    pub(crate) fn store(
        &mut self,
        session: &str,
        text: String,
        ids: Arc<[u32]>,
        cuts: Vec<Cut>,
        generation: u64,
    ) {
        self.remove(session);
        self.tick += 1;
        let entry = Entry { text, ids, cuts, tick: self.tick, generation };
        let bytes = entry.bytes(session);
        if bytes > self.stats.capacity_bytes {
            return;
        }
        while self.stats.bytes + bytes > self.stats.capacity_bytes {
            let Some((_, oldest)) = self.by_age.pop_first() else { break };
            self.remove(&oldest);
        }
        self.by_age.insert(entry.tick, session.to_owned());
        self.stats.bytes += bytes;
        self.entries.insert(session.to_owned(), entry);
        self.stats.entries = self.entries.len();
    }

    fn remove(&mut self, session: &str) {
        if let Some(old) = self.entries.remove(session) {
            self.by_age.remove(&old.tick);
            self.stats.bytes -= old.bytes(session);
        }
        self.stats.entries = self.entries.len();
    }

    /// Hits, misses and evictions of the session cache so far.
    pub(crate) fn stats(&self) -> CacheStats {
        self.stats
    }
}

/// Length in bytes of the common prefix, on a character boundary of both.
fn common_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    // Back off to a character boundary (the strings may differ inside a multi-byte character).
    (0..=n).rev().find(|&i| a.is_char_boundary(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(start: usize, end: usize, index: usize) -> Cut {
        Cut { start, end, index }
    }

    #[test]
    fn reuses_up_to_the_last_cut_inside_the_common_text() {
        let mut cache = SessionCache::new(1 << 20);
        let ids: Arc<[u32]> = (0..10).collect();
        cache.store("s", "<a>xx<a>yy<a>zz".into(), ids, vec![cut(0, 3, 0), cut(5, 8, 3), cut(10, 13, 6)], 0);
        // Diverges inside the third token: the second cut is the last whole one.
        let r = cache.lookup("s", "<a>xx<a>yy<bzzzz", 0).unwrap();
        assert_eq!((r.start, r.ids, r.cuts), (5, vec![0, 1, 2], vec![cut(0, 3, 0)]));
        assert!(cache.lookup("s", "<b>", 0).is_none(), "only the cut at 0 is inside");
        assert!(cache.lookup("other", "<a>xx<a>yy<a>zz", 0).is_none());
        assert!(cache.lookup("s", "<a>xx<a>yy<a>zz", 1).is_none(), "made in another generation");
        assert_eq!((cache.stats().hits, cache.stats().misses, cache.stats().reused_tokens), (1, 3, 3));
    }

    #[test]
    fn bounded_in_bytes_least_recently_stored_first() {
        let one = ENTRY_OVERHEAD + 1 + 100 + 4 * 10;
        let mut cache = SessionCache::new(2 * one);
        for key in ["a", "b", "c"] {
            cache.store(key, "x".repeat(100), (0..10).collect(), Vec::new(), 0);
        }
        assert_eq!((cache.stats().entries, cache.stats().bytes), (2, 2 * one));
        assert!(!cache.entries.contains_key("a") && cache.entries.contains_key("c"));
        // Re-storing a key replaces it; a too-large prompt is not kept.
        cache.store("b", "y".repeat(100), (0..10).collect(), Vec::new(), 0);
        cache.store("d", "z".repeat(10 * one), (0..1).collect(), Vec::new(), 0);
        assert_eq!(cache.stats().entries, 2);
        assert_eq!(cache.entries["b"].text, "y".repeat(100));
    }

    #[test]
    fn common_prefix_stops_on_a_char_boundary() {
        assert_eq!(common_prefix("aé", "aè"), 1);
        assert_eq!(common_prefix("abc", "abd"), 2);
    }
}

//! The prefix index as control shares it: ingest writes it, prefill picks read it.
//!
//! Ingest hashes a batch's namespaced pages under the read lock ([`KvIndex::prepare`]), then
//! commits the map updates under the write lock in parts of [`COMMIT_PART_BLOCKS`] blocks,
//! releasing it between parts, so a lookup waits for one part, not for a whole batch of hundreds
//! of blocks. Between parts the ingest also waits (200 µs at most) for the lookups that queued
//! behind the last one: std's lock lets the writer take it back before a woken reader runs, which
//! under a flat-out ingest kept a lookup out for 150–250 µs at p99 (43–47 µs with the wait;
//! `cargo xtask bench kv-index`, the rows "while another thread ingests",
//! manual/features/kv_aware_routing.md). parking_lot's fair unlock was measured too: it made every
//! lookup under a flat-out ingest wait for a wake-up (p50 70 µs).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use infera_kv::event::KvEvent;

use crate::routing::KvIndex;
use crate::target::TargetKey;

/// Blocks committed per hold of the write lock: ~100 ns a block of SGLang's own hashes in the maps,
/// ~170–280 ns a namespaced one, so one part holds lookups off for ~2–4 µs, where a whole engine
/// batch of ~750 blocks held them off for ~100 µs. Parts of 64 blocks, alternated with 16 four
/// times (`infera-bench kv-index --requests 1500`, 10,000 lookups while another thread ingests
/// flat out, 2026-12-04): lookup p99 2.4–11.1 µs with 64, 1.2–2.1 µs with 16. The ingest, which lets
/// waiting lookups in between parts, still reached 9–14 M blocks/s under them (14–25 M with 64), far
/// above what a fleet publishes.
pub const COMMIT_PART_BLOCKS: usize = 16;

/// Longest an ingest waits between two parts for the lookups that queued behind the first.
const READERS_FIRST: Duration = Duration::from_micros(200);

/// The index behind its read-write lock.
#[derive(Debug)]
pub struct SharedIndex {
    lock: RwLock<KvIndex>,
    /// Held by an ingest from its prepare to its last part, and by a clear: a clear (a worker
    /// left) never lands between them, which would let the rest of a departed worker's batch
    /// come back after it.
    writers: Mutex<()>,
    /// Lookups waiting for the lock; an ingest lets them in before its next part.
    readers_waiting: AtomicUsize,
}

impl SharedIndex {
    /// Shares `index`.
    pub fn new(index: KvIndex) -> Self {
        Self { lock: RwLock::new(index), writers: Mutex::new(()), readers_waiting: AtomicUsize::new(0) }
    }

    /// The index, for a lookup.
    pub fn read(&self) -> RwLockReadGuard<'_, KvIndex> {
        if let Ok(index) = self.lock.try_read() {
            return index;
        }
        let _queued = Queued::on(&self.readers_waiting);
        self.lock.read().expect("kv index poisoned by an earlier panic")
    }

    /// Applies one batch of `target`'s events, if `current()` (asked under the writers' lock, so
    /// no clear lands between it and the last part) still says they are wanted.
    pub fn ingest(&self, target: TargetKey, events: &[KvEvent], current: impl FnOnce() -> bool) {
        let _writer = self.writers.lock().expect("kv ingest poisoned by an earlier panic");
        if !current() {
            return;
        }
        let mut prepared = self.read().prepare(target, events);
        while !self.write().commit_some(target, &mut prepared, COMMIT_PART_BLOCKS) {
            // Without this the ingest takes the lock back before a woken lookup runs.
            let until = Instant::now() + READERS_FIRST;
            while self.readers_waiting.load(Ordering::Relaxed) > 0 && Instant::now() < until {
                std::thread::yield_now();
            }
        }
    }

    /// Forgets everything `targets` hold.
    pub fn clear(&self, targets: &[TargetKey]) {
        if targets.is_empty() {
            return;
        }
        let _writer = self.writers.lock().expect("kv ingest poisoned by an earlier panic");
        let mut index = self.write();
        for &t in targets {
            index.clear_target(t);
        }
    }

    /// The index itself, once no one else shares it.
    pub fn into_inner(self) -> KvIndex {
        self.lock.into_inner().expect("kv index poisoned by an earlier panic")
    }

    fn write(&self) -> RwLockWriteGuard<'_, KvIndex> {
        self.lock.write().expect("kv index poisoned by an earlier panic")
    }
}

/// A lookup counted as queued for the lock while it lives (also when the wait panics).
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    fn on(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use infera_kv::event::Medium;
    use infera_kv::hash::page_hashes;

    use super::*;

    /// A clear issued while a batch is being committed (its first parts already visible) lands
    /// after the batch's last part: the target ends empty, not holding the rest of the batch.
    #[test]
    fn a_clear_during_an_ingest_waits_for_its_last_part() {
        const PAGES: usize = 50_000;
        let tokens: Vec<u32> = (0..PAGES as u32 * 4).collect();
        let hashes = page_hashes(&tokens, 4);
        let batch = [KvEvent::BlockStored {
            block_hashes: hashes.iter().map(|h| h.0).collect(),
            parent_block_hash: None,
            token_ids: tokens.iter().map(|&t| u64::from(t)).collect(),
            block_size: 4,
            medium: Medium::Gpu,
            cache_salt: None,
            lora_name: None,
        }];
        let shared = SharedIndex::new(KvIndex::new(usize::MAX));
        let target = TargetKey::from_index(0);
        std::thread::scope(|s| {
            s.spawn(|| shared.ingest(target, &batch, || true));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while shared.read().stats().blocks == 0 {
                assert!(std::time::Instant::now() < deadline, "the ingest never started");
                std::hint::spin_loop();
            }
            shared.clear(&[target]);
        });
        assert_eq!(shared.read().stats().blocks, 0, "the rest of the batch came back after the clear");
        shared.ingest(target, &batch, || false);
        assert_eq!(shared.read().stats().blocks, 0, "a batch no longer wanted is dropped");
        shared.ingest(target, &batch, || true);
        assert_eq!(shared.read().stats().blocks, PAGES);
    }
}

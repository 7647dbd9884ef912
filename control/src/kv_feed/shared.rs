//! The prefix index as control shares it: ingest writes it, prefill picks read it.
//!
//! Ingest hashes a batch under the read lock ([`KvIndex::prepare`]), then commits the map updates
//! under the write lock in parts of [`COMMIT_PART_BLOCKS`] blocks, unlocking *fairly* after each
//! part: the lock goes straight to a waiting reader. An unfair unlock lets the ingesting thread
//! take the lock back before a woken reader runs; with a burst of events that starved a lookup
//! for hundreds of microseconds (`cargo xtask bench kv-index`, the "while another thread ingests"
//! row, manual/features/kv_aware_routing.md).

use infera_kv::event::KvEvent;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::routing::KvIndex;
use crate::target::TargetKey;

/// Blocks committed per hold of the write lock: ~150 ns a block in the maps, so a lookup waits
/// ~10 µs at most behind one part where a whole engine batch (hundreds of blocks) would hold it
/// off for ~100 µs.
pub const COMMIT_PART_BLOCKS: usize = 64;

/// The index behind its read-write lock.
#[derive(Debug)]
pub struct SharedIndex {
    lock: RwLock<KvIndex>,
}

impl SharedIndex {
    /// Shares `index`.
    pub fn new(index: KvIndex) -> Self {
        Self { lock: RwLock::new(index) }
    }

    /// The index, for a lookup.
    pub fn read(&self) -> RwLockReadGuard<'_, KvIndex> {
        self.lock.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies one batch of `target`'s events. One task ingests a target (nothing else may change
    /// its blocks between the prepare and the commits).
    pub fn ingest(&self, target: TargetKey, events: &[KvEvent]) {
        let mut prepared = self.read().prepare(target, events);
        while !self.write().commit_some(target, &mut prepared, COMMIT_PART_BLOCKS) {}
    }

    /// Forgets everything `targets` hold.
    pub fn clear(&self, targets: &[TargetKey]) {
        if targets.is_empty() {
            return;
        }
        let mut index = self.write();
        for &t in targets {
            index.clear_target(t);
        }
    }

    /// The index itself, once no one else shares it.
    pub fn into_inner(self) -> KvIndex {
        self.lock.into_inner().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, KvIndex> {
        self.lock.write().unwrap_or_else(PoisonError::into_inner)
    }
}

//! The legacy round-robin turn of each candidate pool. Scoring keeps it; the view only says which
//! pool a pick draws from and how large it is.

use std::collections::HashMap;

/// A candidate pool's identity. The view gives a fresh one each time a pool comes into being, so a
/// pool that emptied and filled again starts its turn from the beginning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId(u32);

impl PoolId {
    /// An id from a counter (the view's).
    pub fn from_index(i: u32) -> Self {
        Self(i)
    }
}

/// The pool one pick draws its candidates from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolRef {
    /// The pool's id (its round-robin position is kept under it).
    pub id: PoolId,
    /// Its size, eligible targets or not (round-robin positions count them all).
    pub len: usize,
}

/// A pool's round-robin position, borrowed for one pick.
#[derive(Debug)]
pub struct PoolCursor<'a> {
    /// Next position for round-robin.
    pub cursor: &'a mut usize,
    /// Size of the pool, eligible or not.
    pub len: usize,
}

/// The round-robin position of every pool that has taken a pick.
#[derive(Debug, Default)]
pub struct RoundRobin {
    cursors: HashMap<PoolId, usize>,
}

impl RoundRobin {
    /// The position of `pool`, from the start for a pool not seen before.
    pub fn cursor(&mut self, pool: PoolRef) -> PoolCursor<'_> {
        PoolCursor { cursor: self.cursors.entry(pool.id).or_default(), len: pool.len }
    }

    /// Forgets the positions of pools that are gone (`live` says which remain).
    pub fn retain(&mut self, live: impl Iterator<Item = PoolId>) {
        let live: Vec<PoolId> = live.collect();
        self.cursors.retain(|id, _| live.contains(id));
    }
}

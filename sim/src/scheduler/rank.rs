//! One DP rank: its prefix cache, prefill queue, prefill batch in flight and decode set.

use std::collections::VecDeque;
use std::time::Duration;

use crate::prefix_cache::PrefixCache;

use super::ReqId;

/// Order of the prefill queue (`--schedule-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOrder {
    /// First come, first served.
    Fcfs,
    /// Fewest uncached prompt tokens first (estimated at arrival), then arrival.
    ShortestPrefillFirst,
}

/// A prefill batch (one chunk) in flight.
#[derive(Debug, Clone)]
pub(super) struct Batch {
    /// When it completes (model time).
    pub(super) ends: Duration,
    /// Each request in it and the new tokens it prefills in this chunk.
    pub(super) parts: Vec<(ReqId, u32)>,
}

/// A request waiting for prefill, with its queue keys.
#[derive(Debug, Clone, Copy)]
pub(super) struct Waiting {
    pub(super) id: ReqId,
    /// Uncached tokens estimated at arrival (the shortest-prefill-first key).
    pub(super) estimate: u32,
}

/// One DP rank.
#[derive(Debug)]
pub(super) struct Rank {
    pub(super) cache: PrefixCache,
    pub(super) waiting: VecDeque<Waiting>,
    /// A request whose prefill continues in the next chunk (it goes first).
    pub(super) chunked: Option<ReqId>,
    pub(super) batch: Option<Batch>,
    /// Requests decoding, in join order.
    pub(super) running: Vec<ReqId>,
    /// Requests held by the stall fault (they keep their slot but do not step).
    pub(super) stalled: Vec<ReqId>,
    /// Requests in the KV-transfer phase (prefill: waiting for the decode to pull;
    /// decode: waiting for the KV to arrive).
    pub(super) transfer: Vec<ReqId>,
    /// Decode role: waiting for a KV reservation, FIFO (SGLang's prealloc queue).
    pub(super) prealloc: VecDeque<ReqId>,
    /// Decode role: retracted, FIFO, KV freed.
    pub(super) retracted: VecDeque<ReqId>,
    /// Requests the last retraction gave back, not yet logged.
    pub(super) retracted_pending: u32,
    /// What the last decode log saw (`queues.retracted`).
    pub(super) retracted_logged: u32,
    /// SGLang's decode step-time moments (`decode_moments`).
    pub(super) moments: super::moments::DecodeMoments,
}

impl Rank {
    pub(super) fn new(cache: PrefixCache) -> Self {
        Self {
            cache,
            waiting: VecDeque::new(),
            chunked: None,
            batch: None,
            running: Vec::new(),
            stalled: Vec::new(),
            transfer: Vec::new(),
            prealloc: VecDeque::new(),
            retracted: VecDeque::new(),
            retracted_pending: 0,
            retracted_logged: 0,
            moments: Default::default(),
        }
    }

    /// Takes the next request to prefill from the queue in `order`.
    pub(super) fn pop_next(&mut self, order: QueueOrder) -> Option<ReqId> {
        let at = match order {
            QueueOrder::Fcfs => 0,
            // Ties keep arrival order: the first minimum wins.
            QueueOrder::ShortestPrefillFirst => {
                let mut best = 0;
                for (i, w) in self.waiting.iter().enumerate() {
                    if w.estimate < self.waiting[best].estimate {
                        best = i;
                    }
                }
                best
            }
        };
        self.waiting.remove(at).map(|w| w.id)
    }

    /// Forgets `id` wherever it is queued or held (an in-flight batch or step skips it later).
    pub(super) fn forget(&mut self, id: ReqId) {
        self.waiting.retain(|w| w.id != id);
        if self.chunked == Some(id) {
            self.chunked = None;
        }
        self.running.retain(|&r| r != id);
        self.stalled.retain(|&r| r != id);
        self.transfer.retain(|&r| r != id);
        self.prealloc.retain(|&r| r != id);
        self.retracted.retain(|&r| r != id);
    }
}

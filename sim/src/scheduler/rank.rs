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
    /// Highest response ratio next with token-based aging (SGLang's `hrrn`,
    /// `SchedulePolicy._sort_by_hrrn`): the prefill tokens the rank has launched since the
    /// request arrived over its uncached tokens, highest first; a request with nothing to
    /// prefill first; ties by arrival (SGLang: by rid).
    Hrrn,
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
    /// The rank's [`Rank::processed`] when it arrived (the `hrrn` aging key).
    pub(super) arrived_at_processed: u64,
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
    /// Prefill tokens of every batch launched so far (SGLang's `processed_tokens_counter`).
    pub(super) processed: u64,
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
            processed: 0,
        }
    }

    /// Takes the next request to prefill from the queue in `order`.
    #[cfg(test)]
    pub(super) fn pop_next(&mut self, order: QueueOrder) -> Option<ReqId> {
        let at = self.next_index(order)?;
        self.waiting.remove(at).map(|w| w.id)
    }

    /// Where in the queue the next request to prefill in `order` is.
    pub(super) fn next_index(&self, order: QueueOrder) -> Option<usize> {
        if self.waiting.is_empty() {
            return None;
        }
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
            QueueOrder::Hrrn => {
                let processed = self.processed;
                // (nothing to prefill, waited tokens / uncached), compared without division.
                let key = |w: &Waiting| {
                    let waited = u128::from(processed.saturating_sub(w.arrived_at_processed));
                    (w.estimate == 0, waited, u128::from(w.estimate.max(1)))
                };
                let mut best = 0;
                for (i, w) in self.waiting.iter().enumerate() {
                    let (empty, waited, uncached) = key(w);
                    let (b_empty, b_waited, b_uncached) = key(&self.waiting[best]);
                    let higher =
                        if empty != b_empty { empty } else { waited * b_uncached > b_waited * uncached };
                    if higher {
                        best = i;
                    }
                }
                best
            }
        };
        Some(at)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(processed: u64, waiting: &[(u64, u32, u64)]) -> Rank {
        let mut r = Rank::new(PrefixCache::new(1, 1_000));
        r.processed = processed;
        r.waiting = waiting
            .iter()
            .map(|&(id, estimate, arrived_at_processed)| Waiting {
                id: ReqId(id),
                estimate,
                arrived_at_processed,
            })
            .collect();
        r
    }

    #[test]
    fn hrrn_ages_a_long_prompt_past_shorter_newer_ones() {
        // The long prompt has waited 10,000 launched tokens for its 8,000 (ratio 1.25); the
        // short one 50 for its 100 (0.5). Shortest-prefill-first takes the short one.
        let waiting = [(1, 8_000, 0), (2, 100, 9_950)];
        assert_eq!(rank(10_000, &waiting).pop_next(QueueOrder::Hrrn), Some(ReqId(1)));
        assert_eq!(rank(10_000, &waiting).pop_next(QueueOrder::ShortestPrefillFirst), Some(ReqId(2)));
        // Fresh, the short one's ratio is the higher.
        assert_eq!(
            rank(10_000, &[(1, 8_000, 9_000), (2, 100, 9_950)]).pop_next(QueueOrder::Hrrn),
            Some(ReqId(2))
        );
        // Nothing to prefill goes first; equal ratios keep arrival order.
        assert_eq!(rank(10_000, &[(1, 100, 0), (2, 0, 10_000)]).pop_next(QueueOrder::Hrrn), Some(ReqId(2)));
        assert_eq!(
            rank(10_000, &[(1, 100, 9_000), (2, 200, 8_000)]).pop_next(QueueOrder::Hrrn),
            Some(ReqId(1))
        );
    }
}

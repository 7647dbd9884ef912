//! The prefill queues' next arrivals: decode reservations admitted before their request picked
//! its prefill. A PD request picks its prefill once its decode is admitted
//! (`manual/features/service_classes.md`), so for the moment between the two picks its prompt
//! is on no prefill queue yet. The prefill guard (`crate::admission::prefill_admits`) counts
//! these prompts on the prefill target each was expected at: without them, one dispatcher sweep
//! judges every held waiter against the same short queue.

use std::collections::HashMap;

use crate::target::TargetKey;

/// Where a decode reservation's prefill is expected, and what it will book there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AwaitingPrefill {
    /// The prefill target where the request would find the fewest tokens queued.
    pub target: TargetKey,
    /// What its prefill will book there: its prompt less what that target caches of it.
    pub tokens: u64,
}

/// Per decode reservation (by sequence), its awaited prefill; per prefill target, their sum (a
/// target once awaited keeps its entry: there are few).
#[derive(Debug, Default)]
pub(super) struct AwaitingIndex {
    pub(super) by_decode: HashMap<u64, AwaitingPrefill>,
    tokens_on: HashMap<TargetKey, u64>,
}

impl AwaitingIndex {
    /// Decode reservation `seq` awaits `prefill`.
    pub(super) fn add(&mut self, seq: u64, prefill: AwaitingPrefill) {
        let fresh = self.by_decode.insert(seq, prefill).is_none();
        assert!(fresh, "ledger invariant: a reservation awaits its prefill once");
        *self.tokens_on.entry(prefill.target).or_default() += prefill.tokens;
    }

    /// Decode reservation `seq` no longer awaits its prefill (its request booked one, or the
    /// reservation ended); nothing when it never did.
    pub(super) fn remove(&mut self, seq: u64) {
        let Some(p) = self.by_decode.remove(&seq) else { return };
        let sum = self.tokens_on.get_mut(&p.target).expect("ledger invariant: an awaited target has a sum");
        *sum = sum.checked_sub(p.tokens).expect("ledger invariant: awaited tokens never go negative");
    }

    /// The tokens awaited on prefill target `target`.
    pub(super) fn tokens_on(&self, target: TargetKey) -> u64 {
        self.tokens_on.get(&target).copied().unwrap_or(0)
    }

    /// How many decode reservations await their prefill.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_decode.len()
    }
}

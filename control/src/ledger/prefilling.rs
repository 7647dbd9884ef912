//! The decode reservations still in prefill, per target: the exact [`Prefilling`] aggregate in
//! each target's [`Load`] and, beside it, each one's booking time and tokens, so a pick can weigh
//! them by their age while touching only the candidates' own prefilling reservations.

use std::collections::HashMap;
use std::time::Instant;

use crate::target::{Load, Prefilling, TargetKey};

/// One decode reservation still in prefill, as a pick weighs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillingEntry {
    /// When its decode reservation was booked (monotonic).
    pub booked: Instant,
    /// Its input tokens.
    pub tokens: u64,
}

/// Per target, the prefilling decode reservations by sequence.
#[derive(Debug, Default)]
pub(super) struct PrefillingIndex {
    by_target: Vec<HashMap<u64, PrefillingEntry>>,
}

impl PrefillingIndex {
    /// Marks decode reservation `seq` on `target` prefilling, adding it to the aggregate.
    pub(super) fn add(&mut self, load: &mut Load, target: TargetKey, seq: u64, entry: PrefillingEntry) {
        let i = target.index();
        if self.by_target.len() <= i {
            self.by_target.resize_with(i + 1, HashMap::new);
        }
        let fresh = self.by_target[i].insert(seq, entry).is_none();
        assert!(fresh, "ledger invariant: a reservation is marked prefilling once");
        load.prefilling.requests += 1;
        load.prefilling.tokens += entry.tokens;
    }

    /// Unmarks it (its prefill ended, or it ended itself), taking it off the aggregate.
    pub(super) fn remove(&mut self, load: &mut Load, target: TargetKey, seq: u64) {
        let entry = self
            .by_target
            .get_mut(target.index())
            .and_then(|m| m.remove(&seq))
            .expect("ledger invariant: an unmarked reservation was marked");
        let p: &mut Prefilling = &mut load.prefilling;
        p.requests =
            p.requests.checked_sub(1).expect("ledger invariant: prefilling requests never go negative");
        p.tokens = p
            .tokens
            .checked_sub(entry.tokens)
            .expect("ledger invariant: prefilling tokens never go negative");
    }

    /// The target's prefilling reservations, in no particular order.
    pub(super) fn on(&self, target: TargetKey) -> impl Iterator<Item = &PrefillingEntry> {
        self.by_target.get(target.index()).into_iter().flat_map(HashMap::values)
    }
}

//! The ITL targets of the requests each target holds: the tightest one is the limit fleet
//! admission keeps the target's worker's predicted step under (`crate::admission`).

use std::collections::BTreeMap;

use crate::target::TargetKey;

/// Per target, how many held reservations were admitted under each ITL target (ms).
#[derive(Debug, Default)]
pub(super) struct AdmitLimits {
    per_target: Vec<BTreeMap<u32, u32>>,
}

impl AdmitLimits {
    pub(super) fn add(&mut self, target: TargetKey, itl_ms: u32) {
        let i = target.index();
        if self.per_target.len() <= i {
            self.per_target.resize_with(i + 1, BTreeMap::new);
        }
        *self.per_target[i].entry(itl_ms).or_insert(0) += 1;
    }

    pub(super) fn remove(&mut self, target: TargetKey, itl_ms: u32) {
        let counts = &mut self.per_target[target.index()];
        let n = counts.get_mut(&itl_ms).expect("ledger invariant: an ITL target is removed once per add");
        *n -= 1;
        if *n == 0 {
            counts.remove(&itl_ms);
        }
    }

    /// The tightest ITL target among the requests `target` holds (`None`: none holds one).
    pub(super) fn tightest(&self, target: TargetKey) -> Option<u32> {
        self.per_target.get(target.index()).and_then(|c| c.keys().next().copied())
    }
}

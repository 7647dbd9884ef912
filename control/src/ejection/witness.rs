//! How much one identity's failure reports weigh: a proxy that says a target fails is not
//! believed over another proxy that has just used the target without a failure.
//!
//! Each target keeps its **witnesses**: the identities whose last leg on it ended at its end of
//! stream, and when, within the window (`--eject-witness-window-ms`). A failure reported by
//! identity X counts towards the target's ejection only while no other identity witnesses the
//! target; otherwise it is **discounted** (it counts for nothing, as a cancellation would). A
//! failure reported by an identity ends that identity's own witness (a refused connection ends
//! it on every rank of the worker: the port is the worker's), so when a target really dies every
//! proxy that uses it stops witnessing it at its first failure and the ejection goes ahead.
//!
//! What it costs and what it buys:
//!
//! - one proxy (or every proxy sharing one identity) ejects a dead target exactly as before:
//!   nobody else witnesses it;
//! - a credential that reports forged failures cannot eject a target another identity keeps
//!   using successfully; it can eject one nobody else has used within the window;
//! - a real failure seen first by one proxy waits until every proxy that witnessed the target
//!   has seen a failure there too, or until their witness is older than the window — for an idle
//!   proxy, at most the window.
//!
//! While the Router is open (no credential configured), every caller is the one anonymous
//! identity and nothing is discounted.

use std::time::{Duration, Instant};

use crate::identity::Identity;
use crate::target::TargetKey;

/// Witnesses kept per target; the oldest goes when another comes.
const MAX_WITNESSES: usize = 16;

/// One identity's last end of stream on a target.
#[derive(Clone, Debug)]
struct Witness {
    who: Identity,
    at: Instant,
}

/// Every target's witnesses.
#[derive(Debug, Default)]
pub struct Witnesses {
    /// How long a success witnesses; zero counts every failure.
    window: Duration,
    by_target: Vec<Vec<Witness>>,
}

impl Witnesses {
    /// Witnesses for `window` (zero: nobody witnesses, every failure counts).
    pub fn new(window: Duration) -> Self {
        Self { window, by_target: Vec::new() }
    }

    /// `who`'s leg on `key` reached its end of stream at `now`.
    pub fn success(&mut self, key: TargetKey, who: &Identity, now: Instant) {
        if self.window.is_zero() {
            return;
        }
        let i = key.index();
        if self.by_target.len() <= i {
            self.by_target.resize_with(i + 1, Vec::new);
        }
        let window = self.window;
        let list = &mut self.by_target[i];
        list.retain(|w| &w.who != who && now.saturating_duration_since(w.at) < window);
        if list.len() >= MAX_WITNESSES {
            list.remove(0);
        }
        list.push(Witness { who: who.clone(), at: now });
    }

    /// `who` reported a failure on `key` at `now`: whether it counts (`false`: another identity
    /// witnesses the target). `who` witnesses it no longer either way.
    pub fn failure_counts(&mut self, key: TargetKey, who: &Identity, now: Instant) -> bool {
        let Some(list) = self.by_target.get_mut(key.index()) else { return true };
        let window = self.window;
        list.retain(|w| &w.who != who && now.saturating_duration_since(w.at) < window);
        list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> Identity {
        Identity::new(name).unwrap()
    }

    #[test]
    fn another_identitys_recent_success_discounts_a_failure_until_it_fails_or_ages() {
        let (t0, key, window) = (Instant::now(), TargetKey::from_index(3), Duration::from_secs(60));
        let mut w = Witnesses::new(window);
        let (a, b) = (id("proxy-a"), id("proxy-b"));
        assert!(w.failure_counts(key, &a, t0), "nobody witnesses a target never used");
        w.success(key, &b, t0);
        assert!(!w.failure_counts(key, &a, t0), "b used it a moment ago: a's report is discounted");
        assert!(w.failure_counts(key, &b, t0), "b's own failure counts (nobody else witnesses)");
        assert!(w.failure_counts(key, &a, t0), "b failed there too: a's reports count now");
        // b's success witnesses the target for the window, no longer.
        w.success(key, &b, t0);
        assert!(!w.failure_counts(key, &a, t0 + window - Duration::from_millis(1)));
        assert!(w.failure_counts(key, &a, t0 + window));
        // An identity's own success never discounts its own failure.
        w.success(key, &a, t0);
        assert!(w.failure_counts(key, &a, t0));
        // Another target is witnessed on its own.
        w.success(key, &b, t0);
        assert!(w.failure_counts(TargetKey::from_index(0), &a, t0));
    }

    #[test]
    fn a_zero_window_counts_every_failure_and_the_list_is_bounded() {
        let (t0, key) = (Instant::now(), TargetKey::from_index(0));
        let mut off = Witnesses::new(Duration::ZERO);
        off.success(key, &id("b"), t0);
        assert!(off.failure_counts(key, &id("a"), t0));
        let mut w = Witnesses::new(Duration::from_secs(60));
        for i in 0..100 {
            w.success(key, &id(&format!("p{i}")), t0);
        }
        assert_eq!(w.by_target[0].len(), MAX_WITNESSES);
        assert!(!w.failure_counts(key, &id("p99"), t0), "the newest witnesses stay");
    }
}

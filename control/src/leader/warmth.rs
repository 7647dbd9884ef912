//! When a control that took over holds what the proxies hold again. Every proxy that held a
//! lease with the previous leader re-declares its legs as soon as it has a lease with this one;
//! the ledger is warm once each of them has (the proxies the previous leader wrote to etcd,
//! [`super::holders`]), or once the longest of their lease TTLs has passed since the takeover —
//! by then a proxy that has not come back is gone, and so are its legs. Pure: time is passed in.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The takeover's progress.
#[derive(Clone, Debug)]
pub struct Warmth {
    since: Instant,
    /// The proxies to wait for, with their lease TTLs; `None` when nobody knows (no etcd).
    expected: Option<HashMap<String, Duration>>,
    back: HashSet<String>,
    /// The proxies given up on (after the wait), handed out once.
    pruned: bool,
    /// How long to wait at most when the expected proxies are unknown or none named a TTL.
    default_ttl: Duration,
}

impl Warmth {
    /// A takeover at `since`, waiting for `expected` (or, unknown, for `default_ttl`).
    pub fn new(since: Instant, expected: Option<HashMap<String, Duration>>, default_ttl: Duration) -> Self {
        Self { since, expected, back: HashSet::new(), pruned: false, default_ttl }
    }

    /// The proxy `holder` has re-declared under a lease with this control.
    pub fn redeclared(&mut self, holder: &str) {
        self.back.insert(holder.to_owned());
    }

    /// Whether the ledger holds what the proxies hold.
    pub fn is_warm(&self, now: Instant) -> bool {
        let waited = now.saturating_duration_since(self.since);
        match &self.expected {
            None => waited >= self.default_ttl,
            Some(expected) => {
                expected.keys().all(|h| self.back.contains(h))
                    || waited >= expected.values().copied().max().unwrap_or(self.default_ttl)
            }
        }
    }

    /// Once the wait is over, the expected proxies that never came back — gone, to be struck from
    /// the book so that the next takeover does not wait for them; handed out once.
    pub fn take_gone(&mut self, now: Instant) -> Vec<String> {
        if self.pruned || !self.is_warm(now) {
            return Vec::new();
        }
        self.pruned = true;
        self.missing()
    }

    /// The expected proxies that have not come back (after the wait: those gone).
    pub fn missing(&self) -> Vec<String> {
        let mut missing: Vec<String> = self
            .expected
            .iter()
            .flat_map(|e| e.keys())
            .filter(|h| !self.back.contains(*h))
            .cloned()
            .collect();
        missing.sort();
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn warm_once_every_expected_proxy_is_back_or_the_longest_ttl_has_passed() {
        let t0 = Instant::now();
        let expected = HashMap::from([("p1".to_owned(), TTL), ("p2".to_owned(), Duration::from_secs(4))]);
        let mut w = Warmth::new(t0, Some(expected), Duration::from_secs(30));
        assert!(!w.is_warm(t0));
        w.redeclared("p1");
        w.redeclared("stranger");
        assert!(!w.is_warm(t0 + Duration::from_secs(5)));
        assert_eq!(w.missing(), ["p2"]);
        w.redeclared("p2");
        assert!(w.is_warm(t0 + Duration::from_millis(1)));
        let mut gone = Warmth::new(t0, Some(HashMap::from([("p1".to_owned(), TTL)])), Duration::ZERO);
        assert!(!gone.is_warm(t0 + TTL - Duration::from_millis(1)));
        assert!(gone.is_warm(t0 + TTL));
        assert!(gone.take_gone(t0).is_empty(), "still waiting");
        assert_eq!(gone.take_gone(t0 + TTL), ["p1"]);
        assert!(gone.take_gone(t0 + TTL).is_empty(), "handed out once");
        gone.redeclared("p1");
        assert!(gone.missing().is_empty());
    }

    #[test]
    fn nobody_expected_is_warm_at_once_and_unknown_waits_the_default_ttl() {
        let t0 = Instant::now();
        assert!(Warmth::new(t0, Some(HashMap::new()), TTL).is_warm(t0));
        let unknown = Warmth::new(t0, None, TTL);
        assert!(!unknown.is_warm(t0 + TTL - Duration::from_millis(1)));
        assert!(unknown.is_warm(t0 + TTL));
    }
}

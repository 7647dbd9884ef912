//! How long prefill phases take, measured from the ledger, and how much a held decode request
//! still in prefill counts by its age (`--decode-prefilling-age-decay`).
//!
//! A prefill phase is a prefill reservation from its booking to its end of stream: the request
//! waited in the prefill queue and was computed. Per model (the decode pool whose requests those
//! prefills feed), [`PhaseWindows`] keeps the last [`PHASE_WINDOW`] phases and their median `m`.
//!
//! A decode reservation that has been prefilling for `age` counts
//!
//! ```text
//! w(age) = min(1, m / age)
//! ```
//!
//! of a request (and of its tokens). Up to the median age it counts fully: it will reach the
//! decode about when a request picked now does. Past it, it counts less and less. Prefill waits
//! are heavy-tailed — the prefill runs shortest-prefill-first, so a long cold prompt is passed
//! by again and again while the queue is saturated — and for a heavy-tailed wait the expected
//! *remaining* wait grows with the wait so far (for a Pareto tail with index α > 1 it is
//! `age / (α − 1)`). A request that has been prefilling far longer than prefills usually take
//! is stuck and will likely still be stuck when the request picked now is done decoding: it
//! does not load the decode steps the new request will share. `m / age` is the fraction of
//! that horizon (one typical phase) over the stuck request's expected remaining wait, up to a
//! constant. Before any phase has been measured, w = 1: the cost as it is without the decay.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use infera_proto::types::{ModelName, PickKind, ReleaseReason};

/// Completed prefill phases kept per model for the median.
pub const PHASE_WINDOW: usize = 256;

/// Whether a release of a `kind` reservation for `reason` completes a prefill phase: a prefill
/// that reached its end of stream. A cancelled or failed prefill did not finish, and a lease
/// expiry or a target's removal says nothing of how long prefills take.
pub fn is_phase_end(kind: PickKind, reason: ReleaseReason) -> bool {
    kind == PickKind::Prefill && reason == ReleaseReason::Eof
}

/// How much a request prefilling for `age` counts, given the median phase `median` (`None`
/// before any phase was measured): `min(1, median / age)`.
pub fn age_weight(age: Duration, median: Option<Duration>) -> f64 {
    match median {
        Some(m) if age > m => m.as_secs_f64() / age.as_secs_f64(),
        _ => 1.0,
    }
}

/// The last `capacity` phase durations and their median.
#[derive(Clone, Debug)]
pub struct PhaseWindow {
    capacity: usize,
    /// In arrival order (the oldest leaves first).
    arrivals: VecDeque<Duration>,
    /// The same durations, sorted.
    sorted: Vec<Duration>,
}

impl PhaseWindow {
    /// An empty window of `capacity` (at least 1) samples.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self { capacity, arrivals: VecDeque::with_capacity(capacity), sorted: Vec::with_capacity(capacity) }
    }

    /// Adds a phase, dropping the oldest when full. O(capacity).
    pub fn push(&mut self, phase: Duration) {
        if self.arrivals.len() == self.capacity
            && let Some(oldest) = self.arrivals.pop_front()
        {
            let i = self.sorted.binary_search(&oldest).expect("every arrival is in the sorted copy");
            self.sorted.remove(i);
        }
        self.arrivals.push_back(phase);
        let i = self.sorted.partition_point(|d| *d < phase);
        self.sorted.insert(i, phase);
    }

    /// The median (the mean of the middle two for an even count); `None` when empty.
    pub fn median(&self) -> Option<Duration> {
        let n = self.sorted.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(self.sorted[n / 2]),
            _ => Some((self.sorted[n / 2 - 1] + self.sorted[n / 2]) / 2),
        }
    }

    /// The `q` quantile (0 = the quickest, 1 = the slowest, nearest rank below); `None` when
    /// empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.sorted.len();
        (n > 0).then(|| self.sorted[((n - 1) as f64 * q.clamp(0.0, 1.0)).floor() as usize])
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// Whether no phase was measured yet.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }
}

/// The phase windows of every model that has completed a prefill.
///
/// Per model, not global: a model's prefill pool has its own queue, prompt lengths and speed,
/// and its decode pool only ever receives its own prefills; a global median would let a fast
/// model's prefills make a slow model's ordinary waits look stuck.
#[derive(Clone, Debug)]
pub struct PhaseWindows {
    capacity: usize,
    by_model: HashMap<ModelName, PhaseWindow>,
}

impl Default for PhaseWindows {
    fn default() -> Self {
        Self::new(PHASE_WINDOW)
    }
}

impl PhaseWindows {
    /// Windows of `capacity` samples each.
    pub fn new(capacity: usize) -> Self {
        Self { capacity, by_model: HashMap::new() }
    }

    /// Records one completed phase of `model`; returns the model's median after it.
    pub fn record(&mut self, model: &ModelName, phase: Duration) -> Duration {
        let capacity = self.capacity;
        let window = self.by_model.entry(model.clone()).or_insert_with(|| PhaseWindow::new(capacity));
        window.push(phase);
        window.median().expect("a sample was just pushed")
    }

    /// The model's median phase; `None` before its first.
    pub fn median(&self, model: &ModelName) -> Option<Duration> {
        self.by_model.get(model).and_then(PhaseWindow::median)
    }

    /// The model's `q` quantile phase ([`PhaseWindow::quantile`]); `None` before its first.
    pub fn quantile(&self, model: &ModelName, q: f64) -> Option<Duration> {
        self.by_model.get(model).and_then(|w| w.quantile(q))
    }

    /// A model's window, if it has one.
    pub fn window(&self, model: &ModelName) -> Option<&PhaseWindow> {
        self.by_model.get(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn a_prefilling_request_counts_fully_up_to_the_median_age_then_by_median_over_age() {
        assert_eq!(age_weight(s(100), None), 1.0, "no phase measured yet: the cost as without decay");
        assert_eq!(age_weight(Duration::ZERO, Some(s(10))), 1.0);
        assert_eq!(age_weight(s(10), Some(s(10))), 1.0);
        assert_eq!(age_weight(s(20), Some(s(10))), 0.5);
        assert_eq!(age_weight(s(100), Some(s(10))), 0.1);
        assert_eq!(
            age_weight(s(5), Some(Duration::ZERO)),
            0.0,
            "every prefill was instant: a waiting one is stuck"
        );
        let weights: Vec<f64> = (1..50).map(|a| age_weight(s(a), Some(s(7)))).collect();
        assert!(weights.windows(2).all(|p| p[1] <= p[0]), "never grows with the age");
    }

    #[test]
    fn the_window_keeps_the_median_of_the_last_samples_only() {
        let mut w = PhaseWindow::new(3);
        assert!(w.is_empty() && w.median().is_none());
        w.push(s(10));
        assert_eq!(w.median(), Some(s(10)));
        w.push(s(30));
        assert_eq!(w.median(), Some(s(20)), "even count: the mean of the middle two");
        w.push(s(20));
        assert_eq!(w.median(), Some(s(20)));
        // 10 leaves: {30, 20, 1} → 20; then 30 leaves: {20, 1, 2} → 2.
        w.push(s(1));
        assert_eq!((w.len(), w.median()), (3, Some(s(20))));
        w.push(s(2));
        assert_eq!(w.median(), Some(s(2)));
        // Equal samples leave one at a time.
        for _ in 0..3 {
            w.push(s(5));
        }
        w.push(s(9));
        assert_eq!((w.len(), w.median()), (3, Some(s(5))));
        let mut d = PhaseWindow::new(100);
        assert_eq!(d.quantile(0.1), None);
        for i in (1..=20).rev() {
            d.push(s(i));
        }
        assert_eq!(
            (d.quantile(0.0), d.quantile(0.1), d.quantile(1.0)),
            (Some(s(1)), Some(s(2)), Some(s(20)))
        );
    }

    #[test]
    fn the_window_median_matches_a_sort_of_the_last_capacity_samples() {
        let mut w = PhaseWindow::new(16);
        let samples: Vec<Duration> = (0..200u64).map(|i| Duration::from_millis((i * 7919) % 1013)).collect();
        for (i, d) in samples.iter().enumerate() {
            w.push(*d);
            let mut last: Vec<Duration> = samples[i.saturating_sub(15)..=i].to_vec();
            last.sort();
            let n = last.len();
            let expected = if n % 2 == 1 { last[n / 2] } else { (last[n / 2 - 1] + last[n / 2]) / 2 };
            assert_eq!(w.median(), Some(expected), "after sample {i}");
        }
    }

    #[test]
    fn each_model_has_its_own_median() {
        let (a, b) = (ModelName::new("a"), ModelName::new("b"));
        let mut phases = PhaseWindows::new(8);
        assert_eq!(phases.median(&a), None);
        phases.record(&a, s(2));
        assert_eq!(phases.record(&a, s(4)), s(3));
        assert_eq!(phases.record(&b, s(60)), s(60));
        assert_eq!((phases.median(&a), phases.median(&b)), (Some(s(3)), Some(s(60))));
        assert_eq!(phases.window(&a).map(PhaseWindow::len), Some(2));
    }
}

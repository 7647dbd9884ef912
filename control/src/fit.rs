//! W fitted online from the engines' own step times (`--decode-request-weight auto`,
//! `manual/features/decode_weight_fit.md`).
//!
//! SGLang keeps, per DP rank, running sums of its decode steps (`decode_moments` in
//! `GET /v1/loads`: steps, Σ batch, Σ step_us, …). Every poll of a decode (or mixed) worker
//! gives one interval of its busiest rank — mean batch, context, mean step time — and a
//! forgetting least-squares fit of step time on requests and context tokens gives what one
//! request costs in tokens: W = (ms per request) / (ms per token).
//!
//! - [`interval`]: two readings → the busiest rank's interval (pure).
//! - [`regress`]: the forgetting regression and its fit quality (pure).
//! - [`estimate`]: one worker's verdict, bounds and smoothing → the W in force (pure).
//! - [`predict`]: the step time a worker's load predicts, and with one more request (pure).
//! - [`WeightFits`] (here): every followed worker's estimate, and each pool's W.
//! - [`metrics`]: the gauges.
//!
//! A pool (the decode workers of one model) uses the geometric mean of its workers' W in force,
//! weighed by their effective samples; a pool none of whose workers has had a trusted fit uses
//! the fallback W (`--decode-request-weight-fallback`).

pub mod estimate;
pub mod interval;
pub mod metrics;
pub mod predict;
pub mod regress;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use infera_proto::types::{ModelName, Role, WorkerId, WorkerRecord};

pub use estimate::{FitReport, Verdict, WorkerFit};
pub use interval::{Moments, RankReading, WorkerReading};

/// How W is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightMode {
    /// The number set (`--decode-request-weight N`).
    #[default]
    Pinned,
    /// Each decode pool's fitted W; the number set is the fallback.
    Auto,
}

impl WeightMode {
    /// A label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pinned => "pinned",
            Self::Auto => "auto",
        }
    }
}

/// One worker's row of a pool's fit.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerRow {
    /// The worker.
    pub worker: WorkerId,
    /// What its estimate says.
    pub report: FitReport,
}

/// A decode pool's fit.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolFit {
    /// The pool's model.
    pub model: ModelName,
    /// Its W from its workers' fits (`None`: no trusted fit yet, the fallback applies).
    pub weight: Option<f64>,
    /// Its workers, by id.
    pub workers: Vec<WorkerRow>,
}

#[derive(Debug)]
struct Entry {
    model: ModelName,
    fit: WorkerFit,
}

/// Every followed decode worker's estimate. Pollers write it; the shell reads it.
#[derive(Debug)]
pub struct WeightFits {
    half_life: Duration,
    workers: Mutex<HashMap<WorkerId, Entry>>,
}

impl WeightFits {
    /// Estimates forgetting with `half_life`.
    pub fn new(half_life: Duration) -> Self {
        Self { half_life, workers: Mutex::default() }
    }

    /// Takes one reading of `record`'s engine (prefill workers are not fitted: their steps are
    /// not decode steps).
    pub fn observe(&self, record: &WorkerRecord, reading: WorkerReading) {
        if record.role == Role::Prefill {
            return;
        }
        let mut map = self.workers.lock().expect("weight fits lock");
        let entry = map
            .entry(record.id.clone())
            .or_insert_with(|| Entry { model: record.model.clone(), fit: WorkerFit::new(self.half_life) });
        if entry.model != record.model {
            *entry = Entry { model: record.model.clone(), fit: WorkerFit::new(self.half_life) };
        }
        entry.fit.observe(reading);
    }

    /// Forgets a worker that left.
    pub fn forget(&self, worker: &WorkerId) {
        self.workers.lock().expect("weight fits lock").remove(worker);
    }

    /// Every pool's fit, by model.
    pub fn pools(&self) -> Vec<PoolFit> {
        let map = self.workers.lock().expect("weight fits lock");
        let mut pools: BTreeMap<&str, Vec<WorkerRow>> = BTreeMap::new();
        for (id, e) in map.iter() {
            pools
                .entry(e.model.as_str())
                .or_default()
                .push(WorkerRow { worker: id.clone(), report: e.fit.report() });
        }
        pools
            .into_iter()
            .map(|(model, mut workers)| {
                workers.sort_by(|a, b| a.worker.as_str().cmp(b.worker.as_str()));
                PoolFit { model: ModelName::new(model), weight: pool_weight(&workers), workers }
            })
            .collect()
    }
}

/// The samples-weighted geometric mean of the workers' W in force.
fn pool_weight(workers: &[WorkerRow]) -> Option<f64> {
    let (mut sum, mut weights) = (0.0, 0.0);
    for r in workers {
        let Some(w) = r.report.weight else { continue };
        let samples = r.report.samples.max(1.0);
        sum += samples * w.ln();
        weights += samples;
    }
    (weights > 0.0).then(|| (sum / weights).exp())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn row(worker: &str, weight: Option<f64>, samples: f64) -> WorkerRow {
        WorkerRow {
            worker: WorkerId::new(worker),
            report: FitReport {
                solution: None,
                verdict: Verdict::Trusted,
                samples,
                weight,
                moved_at: None,
                interval: None,
            },
        }
    }

    #[test]
    fn a_pool_takes_the_samples_weighted_geometric_mean_of_its_workers() {
        let w = pool_weight(&[row("a", Some(1e6), 300.0), row("b", Some(1e5), 100.0), row("c", None, 900.0)]);
        // exp((300 ln 1e6 + 100 ln 1e5) / 400) = 10^5.75
        assert!((w.unwrap() / 10f64.powf(5.75) - 1.0).abs() < 1e-12);
        assert_eq!(pool_weight(&[row("c", None, 900.0)]), None, "no trusted fit: the fallback");
    }

    #[test]
    fn prefills_are_not_fitted_and_workers_group_by_model() {
        let fits = WeightFits::new(Duration::from_secs(60));
        let reading = WorkerReading { at: Instant::now(), ranks: Vec::new() };
        let rec = |id: &str, role, model: &str| WorkerRecord::new(id, role, "http://x:1", model);
        fits.observe(&rec("p", Role::Prefill, "m"), reading.clone());
        fits.observe(&rec("d", Role::Decode, "m"), reading.clone());
        fits.observe(&rec("x", Role::Mixed, "agg"), reading.clone());
        let pools = fits.pools();
        let names: Vec<(&str, Vec<&str>)> = pools
            .iter()
            .map(|p| (p.model.as_str(), p.workers.iter().map(|w| w.worker.as_str()).collect()))
            .collect();
        assert_eq!(names, [("agg", vec!["x"]), ("m", vec!["d"])]);
        fits.forget(&WorkerId::new("d"));
        assert_eq!(fits.pools().len(), 1);
    }
}

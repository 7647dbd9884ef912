//! The fit's gauges: per decode worker, what its latest fit says
//! (`infera_router_decode_request_weight_fitted`, `…_fit_r_squared`, `…_fit_samples`,
//! `…_fit_trusted`), and per pool the W its decode picks use
//! (`infera_router_decode_request_weight`: pinned, fitted or the fallback). Beside them, the step
//! time the fit predicts from the ledger and the one the engine measured
//! (`infera_router_decode_step_predicted_ms`, `…_measured_ms`), the prediction's error per
//! interval (`infera_router_decode_step_prediction_error`), and the ITL the prediction gives a
//! request against the tightest target the worker's requests were admitted under
//! (`infera_router_decode_itl_predicted_ms`, `…_itl_limit_ms`): fleet admission keeps the first
//! within the second.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::metrics::histogram::Histogram;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::PoolFit;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    model: String,
    worker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    model: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

type ErrorHistogram = Family<PoolLabels, Histogram, fn() -> Histogram>;

fn error_histogram() -> Histogram {
    Histogram::new(ERROR_BUCKETS)
}

/// One worker's step as its fit predicts it from the ledger, beside the engine's.
#[derive(Clone, Copy, Debug)]
pub struct StepPrediction {
    /// When the engine's interval was measured.
    pub at: Instant,
    /// The step the fit predicts from the ledger's load (its busiest rank's), ms.
    pub predicted_ms: f64,
    /// The engine's mean step over the interval, ms.
    pub measured_ms: f64,
    /// The ITL a request sees at the predicted step (over the tokens it gains a step), ms.
    pub predicted_itl_ms: f64,
    /// The tightest ITL target among the requests the worker holds under fleet admission, ms.
    pub itl_limit_ms: Option<u32>,
}

/// The fit's gauges.
#[derive(Debug)]
pub struct FitMetrics {
    fitted: Family<WorkerLabels, FloatGauge>,
    r_squared: Family<WorkerLabels, FloatGauge>,
    samples: Family<WorkerLabels, FloatGauge>,
    trusted: Family<WorkerLabels, Gauge>,
    in_use: Family<PoolLabels, FloatGauge>,
    predicted: Family<WorkerLabels, FloatGauge>,
    measured: Family<WorkerLabels, FloatGauge>,
    predicted_itl: Family<WorkerLabels, FloatGauge>,
    itl_limit: Family<WorkerLabels, FloatGauge>,
    error: ErrorHistogram,
    /// The latest interval compared per worker: each is counted once.
    compared: Mutex<HashMap<WorkerLabels, Instant>>,
}

/// `predicted / measured − 1`, from 50 % short to 100 % over.
const ERROR_BUCKETS: [f64; 11] = [-0.5, -0.25, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.25, 1.0];

impl FitMetrics {
    /// Registers the gauges under `infera_router_`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            fitted: Family::default(),
            r_squared: Family::default(),
            samples: Family::default(),
            trusted: Family::default(),
            in_use: Family::default(),
            predicted: Family::default(),
            measured: Family::default(),
            predicted_itl: Family::default(),
            itl_limit: Family::default(),
            error: Family::new_with_constructor(error_histogram),
            compared: Mutex::default(),
        };
        let r = registry.sub_registry_with_prefix("infera_router");
        let per_worker = [
            (
                "decode_request_weight_fitted",
                "W (tokens per request) of the latest step-time fit, per decode worker, trusted or not",
                &m.fitted,
            ),
            ("decode_request_weight_fit_r_squared", "R² of that fit", &m.r_squared),
            (
                "decode_request_weight_fit_samples",
                "Effective (decayed) number of poll intervals in that fit",
                &m.samples,
            ),
        ];
        for (name, help, family) in per_worker {
            r.register(name, help, family.clone());
        }
        r.register(
            "decode_request_weight_fit_trusted",
            "1 when that fit passes the checks that let it move W",
            m.trusted.clone(),
        );
        r.register(
            "decode_request_weight",
            "W the pool's decode picks use: pinned, fitted (auto) or the fallback",
            m.in_use.clone(),
        );
        r.register(
            "decode_step_predicted_ms",
            "Decode step time the worker's fit predicts from the ledger's load (its busiest rank's), ms",
            m.predicted.clone(),
        );
        r.register(
            "decode_step_measured_ms",
            "The worker's mean decode step over its latest poll interval, from the engine's decode_moments, ms",
            m.measured.clone(),
        );
        r.register(
            "decode_itl_predicted_ms",
            "Inter-token latency the predicted step gives a request (step over the tokens a request gains a step), ms",
            m.predicted_itl.clone(),
        );
        r.register(
            "decode_itl_limit_ms",
            "The tightest ITL target among the requests the worker holds under fleet admission (NaN: none held), ms",
            m.itl_limit.clone(),
        );
        r.register(
            "decode_step_prediction_error",
            "predicted / measured - 1 of the decode step time, once per poll interval and worker",
            m.error.clone(),
        );
        m
    }

    /// A worker's prediction against the interval the engine measured (counted in the error
    /// once per interval).
    pub fn prediction(&self, model: &str, worker: &str, p: StepPrediction) {
        let StepPrediction { at, predicted_ms, measured_ms, predicted_itl_ms, itl_limit_ms } = p;
        let labels = WorkerLabels { model: model.to_owned(), worker: worker.to_owned() };
        self.predicted.get_or_create(&labels).set(predicted_ms);
        self.measured.get_or_create(&labels).set(measured_ms);
        self.predicted_itl.get_or_create(&labels).set(predicted_itl_ms);
        // No held request under admission: no target to hold to (NaN, not a stale one).
        self.itl_limit.get_or_create(&labels).set(itl_limit_ms.map_or(f64::NAN, f64::from));
        let mut compared = self.compared.lock().expect("compared lock");
        if compared.get(&labels).is_some_and(|last| *last >= at) {
            return;
        }
        compared.insert(labels, at);
        if let Some(e) = super::predict::relative_error(predicted_ms, measured_ms) {
            self.error.get_or_create(&PoolLabels { model: model.to_owned() }).observe(e);
        }
    }

    /// Sets every gauge; `in_use` is each pool's W.
    pub fn export(&self, pools: &[PoolFit], in_use: impl Fn(&PoolFit) -> f64) {
        for pool in pools {
            let model = pool.model.to_string();
            self.in_use.get_or_create(&PoolLabels { model: model.clone() }).set(in_use(pool));
            for row in &pool.workers {
                let labels = WorkerLabels { model: model.clone(), worker: row.worker.to_string() };
                let trusted = row.report.verdict == super::Verdict::Trusted;
                self.trusted.get_or_create(&labels).set(i64::from(trusted));
                self.samples.get_or_create(&labels).set(row.report.samples);
                let Some(s) = row.report.solution else { continue };
                self.fitted.get_or_create(&labels).set(s.weight_tokens);
                self.r_squared.get_or_create(&labels).set(s.r_squared);
            }
        }
    }
}

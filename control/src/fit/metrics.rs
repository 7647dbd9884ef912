//! The fit's gauges: per decode worker, what its latest fit says
//! (`infera_router_decode_request_weight_fitted`, `…_fit_r_squared`, `…_fit_samples`,
//! `…_fit_trusted`), and per pool the W its decode picks use
//! (`infera_router_decode_request_weight`: pinned, fitted or the fallback).

use std::sync::atomic::AtomicU64;

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

/// The fit's gauges.
#[derive(Debug, Default)]
pub struct FitMetrics {
    fitted: Family<WorkerLabels, FloatGauge>,
    r_squared: Family<WorkerLabels, FloatGauge>,
    samples: Family<WorkerLabels, FloatGauge>,
    trusted: Family<WorkerLabels, Gauge>,
    in_use: Family<PoolLabels, FloatGauge>,
}

impl FitMetrics {
    /// Registers the gauges under `infera_router_`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
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
        m
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

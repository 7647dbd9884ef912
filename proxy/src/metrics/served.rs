//! What the proxy served, per model and per chosen worker: prompt and completion tokens,
//! end-to-end latency, each decode worker's TTFT and ITL as the client saw them; and
//! `infera_proxy_build_info`. Label values are bounded: a model is named only once control
//! routed to it ([`crate::access::model_label`]), a worker is one control listed.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiModelLabels {
    api: &'static str,
    model: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    model: Arc<str>,
    worker: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Per-model and per-worker serving metrics.
#[derive(Debug)]
pub struct ServedMetrics {
    prompt_tokens: Family<ModelLabels, Counter>,
    completion_tokens: Family<ModelLabels, Counter>,
    duration: Family<ApiModelLabels, Histogram>,
    worker_ttft: Family<WorkerLabels, Histogram>,
    worker_itl: Family<WorkerLabels, Histogram>,
}

impl ServedMetrics {
    /// Registers them in `r` (the proxy's `infera_proxy` sub-registry).
    pub fn register(r: &mut Registry) -> Self {
        let m = Self {
            prompt_tokens: Family::default(),
            completion_tokens: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(1e-2, 2.0, 18))),
            worker_ttft: Family::new_with_constructor(|| Histogram::new(exponential_buckets(1e-3, 2.0, 18))),
            worker_itl: Family::new_with_constructor(|| Histogram::new(exponential_buckets(1e-4, 2.0, 16))),
        };
        r.register(
            "prompt_tokens",
            "Prompt tokens of the requests answered, by model: the engine's count when its answer \
             reports usage, else the proxy's (exact when the model has a tokenizer, estimated without)",
            m.prompt_tokens.clone(),
        );
        r.register(
            "completion_tokens",
            "Completion tokens the engines reported in their answers (usage, or /generate's meta_info), by model; \
             a stream reports them when the client asks (stream_options.include_usage)",
            m.completion_tokens.clone(),
        );
        r.register(
            "request_duration_seconds",
            "From a request's arrival to the end of its answer, by API and model",
            m.duration.clone(),
        );
        r.register(
            "worker_ttft_seconds",
            "Time to the first byte of the answer, by model and the decode (or aggregated) worker that answered",
            m.worker_ttft.clone(),
        );
        r.register(
            "worker_itl_seconds",
            "Time between streamed chunks, by model and the worker that streamed them",
            m.worker_itl.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        r.register("build_info", "1, labelled with the proxy's version", build);
        m
    }

    /// A request's tokens, once it ended.
    pub fn tokens(&self, model: &Arc<str>, prompt: u64, completion: Option<u64>) {
        let labels = ModelLabels { model: model.clone() };
        self.prompt_tokens.get_or_create(&labels).inc_by(prompt);
        // The series exists from a model's first answer on, reported or not.
        self.completion_tokens.get_or_create(&labels).inc_by(completion.unwrap_or(0));
    }

    /// A request's whole duration.
    pub fn duration(&self, api: &'static str, model: &Arc<str>, seconds: f64) {
        self.duration.get_or_create(&ApiModelLabels { api, model: model.clone() }).observe(seconds);
    }

    /// The first byte of an answer from `worker`.
    pub fn worker_ttft(&self, model: &Arc<str>, worker: &Arc<str>, seconds: f64) {
        let labels = WorkerLabels { model: model.clone(), worker: worker.clone() };
        self.worker_ttft.get_or_create(&labels).observe(seconds);
    }

    /// A gap between two chunks `worker` streamed.
    pub fn worker_itl(&self, model: &Arc<str>, worker: &Arc<str>, seconds: f64) {
        let labels = WorkerLabels { model: model.clone(), worker: worker.clone() };
        self.worker_itl.get_or_create(&labels).observe(seconds);
    }
}

//! Fleet admission, per model and class: what was admitted at once, after a wait, or shed, how
//! long the waits were, who waits now, and each named tenant's admitted tokens (the shares of
//! `manual/features/service_classes.md`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    model: String,
    class: String,
    /// `admitted` (at once), `waited` (admitted from the queue), `queued` (refused to a caller
    /// that does not wait), `shed`, `cancelled` (the caller left while it waited).
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    model: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    model: String,
    /// A tenant the class file weighs by name; every other is `other`.
    tenant: String,
}

/// How one admission ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Booked without waiting.
    Admitted,
    /// Booked from the queue.
    Waited,
    /// Refused to a caller that does not wait (it calls again to wait).
    Queued,
    /// Its TTFT target could no longer be met.
    Shed,
    /// Its caller left while it waited.
    Cancelled,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Admitted => "admitted",
            Self::Waited => "waited",
            Self::Queued => "queued",
            Self::Shed => "shed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// `infera_router_admissions_total{model,class,outcome}`,
/// `infera_router_admission_wait_seconds{model,class}`, `infera_router_admission_waiting{model,class}`,
/// `infera_router_admitted_tokens_total{model,tenant}`.
#[derive(Debug)]
pub struct AdmissionMetrics {
    outcomes: Family<OutcomeLabels, Counter>,
    wait: Family<ClassLabels, Histogram>,
    waiting: Family<ClassLabels, Gauge>,
    tokens: Family<TenantLabels, Counter>,
}

impl Default for AdmissionMetrics {
    fn default() -> Self {
        Self {
            outcomes: Family::default(),
            wait: Family::new_with_constructor(|| {
                Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 15.0, 60.0])
            }),
            waiting: Family::default(),
            tokens: Family::default(),
        }
    }
}

impl AdmissionMetrics {
    /// Registers the families in `r` (the `infera_router` sub-registry).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "admissions",
            "Decode picks under fleet admission by outcome: admitted at once, waited then admitted, \
             queued (refused to a caller that does not wait), shed (TTFT target unreachable), cancelled",
            self.outcomes.clone(),
        );
        r.register(
            "admission_wait_seconds",
            "How long admitted requests waited in control's admission queue",
            self.wait.clone(),
        );
        r.register(
            "admission_waiting",
            "Requests waiting in control's admission queue now",
            self.waiting.clone(),
        );
        r.register(
            "admitted_tokens",
            "Input tokens admitted per tenant (those the class file weighs by name; others are `other`)",
            self.tokens.clone(),
        );
    }

    /// One admission of `model`/`class` ended as `outcome`.
    pub fn outcome(&self, model: &str, class: &str, outcome: Outcome) {
        let labels =
            OutcomeLabels { model: model.to_owned(), class: class.to_owned(), outcome: outcome.as_str() };
        self.outcomes.get_or_create(&labels).inc();
    }

    /// An admitted request of `tenant` with `tokens`, after `waited` in the queue.
    pub fn admitted(&self, model: &str, class: &str, tenant: &str, tokens: u64, waited: Duration) {
        let labels = ClassLabels { model: model.to_owned(), class: class.to_owned() };
        self.wait.get_or_create(&labels).observe(waited.as_secs_f64());
        let labels = TenantLabels { model: model.to_owned(), tenant: tenant.to_owned() };
        self.tokens.get_or_create(&labels).inc_by(tokens);
    }

    /// `n` requests of `model`/`class` wait now.
    pub fn waiting(&self, model: &str, class: &str, n: usize) {
        let labels = ClassLabels { model: model.to_owned(), class: class.to_owned() };
        self.waiting.get_or_create(&labels).set(n as i64);
    }
}

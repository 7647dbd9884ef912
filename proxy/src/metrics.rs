//! Prometheus metrics of the proxy, registered once and passed down.

mod classes;
mod connections;
mod served;

pub use classes::ClassMetrics;
pub use connections::ConnectionMetrics;
pub use served::ServedMetrics;

use infera_proto::types::{PickKind, ReleaseReason};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use std::sync::Arc;

use crate::error::Leg;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    api: &'static str,
    model: Arc<str>,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: &'static str,
    model: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LegLabels {
    leg: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    key: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenizeLabels {
    outcome: &'static str,
    model: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TlsReloadLabels {
    which: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The proxy's metrics.
#[derive(Debug)]
pub struct ProxyMetrics {
    requests: Family<RequestLabels, Counter>,
    ttft: Family<ApiLabels, Histogram>,
    itl: Histogram,
    inflight: Gauge,
    lease_held: Gauge,
    upstream_errors: Family<LegLabels, Counter>,
    fallback_picks: Family<KindLabels, Counter>,
    pick_seconds: Family<KindLabels, Histogram>,
    pick_batch: Histogram,
    releases: Family<ReasonLabels, Counter>,
    control_errors: Family<CallLabels, Counter>,
    retries: Counter,
    queue_depth: Gauge,
    queue_wait: Histogram,
    rejected: Family<ReasonLabels, Counter>,
    unauthorized: Counter,
    key_reloads: Family<OutcomeLabels, Counter>,
    key_requests: Family<KeyLabels, Counter>,
    tls_reloads: Family<TlsReloadLabels, Counter>,
    token_reloads: Family<OutcomeLabels, Counter>,
    plaintext_leaders: Counter,
    late_picks: Counter,
    redeclared: Family<OutcomeLabels, Counter>,
    tokenize: Family<TokenizeLabels, Counter>,
    tokenize_seconds: Histogram,
    tokenize_cache: Family<ResultLabels, Counter>,
    tokenizer_checks: Family<ResultLabels, Counter>,
    /// Per model and per worker: tokens, durations, TTFT and ITL.
    pub served: ServedMetrics,
    /// Requests per service class.
    pub classes: ClassMetrics,
}

impl ProxyMetrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let r = registry.sub_registry_with_prefix("infera_proxy");
        let m = Self {
            served: ServedMetrics::register(r),
            classes: ClassMetrics::register(r),
            requests: Family::default(),
            ttft: Family::new_with_constructor(|| Histogram::new(exponential_buckets(1e-3, 2.0, 18))),
            itl: Histogram::new(exponential_buckets(1e-4, 2.0, 16)),
            inflight: Gauge::default(),
            lease_held: Gauge::default(),
            upstream_errors: Family::default(),
            fallback_picks: Family::default(),
            pick_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(2e-5, 2.0, 16))),
            pick_batch: Histogram::new(exponential_buckets(1.0, 2.0, 9)),
            releases: Family::default(),
            control_errors: Family::default(),
            retries: Counter::default(),
            queue_depth: Gauge::default(),
            queue_wait: Histogram::new(exponential_buckets(1e-3, 2.0, 16)),
            rejected: Family::default(),
            unauthorized: Counter::default(),
            key_reloads: Family::default(),
            key_requests: Family::default(),
            tls_reloads: Family::default(),
            token_reloads: Family::default(),
            plaintext_leaders: Counter::default(),
            late_picks: Counter::default(),
            redeclared: Family::default(),
            tokenize: Family::default(),
            tokenize_seconds: Histogram::new(exponential_buckets(1e-5, 2.0, 18)),
            tokenize_cache: Family::default(),
            tokenizer_checks: Family::default(),
        };
        r.register(
            "requests",
            "Requests answered, by API, model (once control routed to it; else empty) and HTTP status",
            m.requests.clone(),
        );
        r.register(
            "ttft_seconds",
            "Time to the first byte of the answer's body, as the proxy sees it, by API and model",
            m.ttft.clone(),
        );
        r.register("itl_seconds", "Time between streamed chunks of an answer", m.itl.clone());
        r.register("inflight_requests", "Requests in flight", m.inflight.clone());
        r.register(
            "control_lease",
            "1 while the proxy holds a lease with control (its picks are booked), 0 while it routes by the local fallback",
            m.lease_held.clone(),
        );
        r.register("upstream_errors", "Worker legs that failed, by leg", m.upstream_errors.clone());
        r.register(
            "fallback_picks",
            "Picks routed locally because control did not answer in time",
            m.fallback_picks.clone(),
        );
        r.register(
            "pick_seconds",
            "Time from sending a pick to control's answer (answered picks; a refusal counts), by kind",
            m.pick_seconds.clone(),
        );
        r.register(
            "pick_batch_picks",
            "Picks asked together, sent as one batch (one: PickPrefill or PickDecode; more: one PickMany, or one call each to a control older than PickMany)",
            m.pick_batch.clone(),
        );
        r.register("releases", "Reservations ended, by reason", m.releases.clone());
        r.register("control_errors", "Calls to control that failed, by call", m.control_errors.clone());
        r.register("retries", "Requests re-picked after a failure before the first byte", m.retries.clone());
        r.register(
            "api_key_reloads",
            "Reloads of --api-keys on SIGHUP, by outcome: ok, error",
            m.key_reloads.clone(),
        );
        r.register(
            "tls_reloads",
            "Reloads of the TLS files on SIGHUP, by which (listener: --tls-cert; control: \
             --control-ca/--control-cert) and outcome: ok, error (the files in force stay)",
            m.tls_reloads.clone(),
        );
        r.register(
            "unauthorized",
            "Requests refused 401: no API key, or one the file does not list",
            m.unauthorized.clone(),
        );
        r.register(
            "api_key_requests",
            "Generation requests by API key name and outcome: ok, rate_limited (429)",
            m.key_requests.clone(),
        );
        r.register(
            "queue_depth",
            "Requests waiting for a place in flight (--max-inflight)",
            m.queue_depth.clone(),
        );
        r.register("queue_wait_seconds", "How long queued requests waited for a place", m.queue_wait.clone());
        r.register(
            "rejected",
            "Requests answered 503 overloaded, by reason: queue_full, queue_timeout, at_capacity (every rank at its cap in control)",
            m.rejected.clone(),
        );
        r.register(
            "redeclared_legs",
            "Legs in flight re-declared to a control that did not hold them (restart, failover, local picks), by outcome: booked, unknown_target, over_capacity",
            m.redeclared.clone(),
        );
        r.register(
            "control_token_reloads",
            "Reloads of --control-token-file on SIGHUP, by outcome: ok, error (the token in force stays)",
            m.token_reloads.clone(),
        );
        r.register(
            "control_plaintext_leaders_refused",
            "Leaders a control replica named at a plain http:// URL that this proxy, reaching control over \
             TLS, did not follow",
            m.plaintext_leaders.clone(),
        );
        r.register(
            "late_picks",
            "Picks control answered after the pick deadline; released at once",
            m.late_picks.clone(),
        );
        r.register(
            "tokenize",
            "Requests by what tokenizing their prompt gave: ok, ambiguous (routed on load), skipped \
             (batches, media, history held by the engine), error, none (no tokenizer for the model), \
             and by model (empty: one control does not list)",
            m.tokenize.clone(),
        );
        r.register(
            "tokenize_seconds",
            "Time to render and encode a prompt (requests with a tokenizer)",
            m.tokenize_seconds.clone(),
        );
        r.register(
            "tokenize_cache",
            "Session turns whose token ids reused the previous turn's (hit) or were encoded whole (miss)",
            m.tokenize_cache.clone(),
        );
        r.register(
            "tokenizer_checks",
            "Prompts encoded again by Hugging Face tokenizers to check the fast encoder's ids \
             (--tokenizer-check-every): same, different (the fast encoder is then off), cache_different \
             (the session cache lent other ids; its entries are dropped), error",
            m.tokenizer_checks.clone(),
        );
        m
    }

    /// A request for `model` (empty: none known) was answered with `code` (for streams: the
    /// status of the head).
    pub fn answered(&self, api: &'static str, model: &Arc<str>, code: u16) {
        self.requests.get_or_create(&RequestLabels { api, model: model.clone(), code }).inc();
    }

    /// The first body byte of an answer left after `seconds`.
    pub fn ttft(&self, api: &'static str, model: &Arc<str>, seconds: f64) {
        self.ttft.get_or_create(&ApiLabels { api, model: model.clone() }).observe(seconds);
    }

    /// Gap between two streamed chunks.
    pub fn itl(&self, seconds: f64) {
        self.itl.observe(seconds);
    }

    /// A generation request starts; it counts as in flight until the guard is dropped (for a
    /// relayed answer: when its body ends or the client goes away).
    pub fn request_started(self: &Arc<Self>) -> InflightGuard {
        self.inflight.inc();
        InflightGuard(self.clone())
    }

    /// A leg failed.
    pub fn upstream_error(&self, leg: Leg) {
        self.upstream_errors.get_or_create(&LegLabels { leg: leg.as_str() }).inc();
    }

    /// Whether a lease with control is held now (set when `/metrics` is read).
    pub fn lease_held(&self, held: bool) {
        self.lease_held.set(i64::from(held));
    }

    /// A pick was routed locally.
    pub fn fallback(&self, kind: PickKind) {
        self.fallback_picks.get_or_create(&KindLabels { kind: kind.as_str() }).inc();
    }

    /// Control answered a pick of `kind` after `seconds`.
    pub fn picked(&self, kind: PickKind, seconds: f64) {
        self.pick_seconds.get_or_create(&KindLabels { kind: kind.as_str() }).observe(seconds);
    }

    /// `picks` picks asked together went out as one batch.
    pub fn pick_batch(&self, picks: usize) {
        self.pick_batch.observe(picks as f64);
    }

    /// A leg ended with `reason`.
    pub fn release(&self, reason: ReleaseReason) {
        self.releases.get_or_create(&ReasonLabels { reason: reason.as_str() }).inc();
    }

    /// A call to control failed.
    pub fn control_error(&self, call: &'static str) {
        self.control_errors.get_or_create(&CallLabels { call }).inc();
    }

    /// Legs re-declared to control: `booked` booked anew, `unknown` not (control does not know
    /// their target yet), `full` not (their rank is at its cap).
    pub fn redeclared(&self, booked: u64, unknown: u64, full: u64) {
        self.redeclared.get_or_create(&OutcomeLabels { outcome: "booked" }).inc_by(booked);
        self.redeclared.get_or_create(&OutcomeLabels { outcome: "unknown_target" }).inc_by(unknown);
        self.redeclared.get_or_create(&OutcomeLabels { outcome: "over_capacity" }).inc_by(full);
    }

    /// The counter of leaders refused for a plain-text URL (the control link counts them).
    pub fn plaintext_leaders_counter(&self) -> Counter {
        self.plaintext_leaders.clone()
    }

    /// `--control-token-file` was read again.
    pub fn token_reload(&self, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.token_reloads.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// A pick answered after its deadline was released.
    pub fn late_pick(&self) {
        self.late_picks.inc();
    }

    /// A prompt of `model` (its label, [`crate::access::model_label`]) was tokenized (or not)
    /// with `outcome`, taking `seconds` when a tokenizer ran.
    pub fn tokenized(&self, outcome: &'static str, model: &Arc<str>, seconds: Option<f64>) {
        self.tokenize.get_or_create(&TokenizeLabels { outcome, model: model.clone() }).inc();
        if let Some(s) = seconds {
            self.tokenize_seconds.observe(s);
        }
    }

    /// A session turn hit or missed the tokenizer's session cache.
    pub fn tokenize_cache(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.tokenize_cache.get_or_create(&ResultLabels { result }).inc();
    }

    /// A prompt's ids were checked against the reference encoder, with `result`.
    pub fn tokenizer_checked(&self, result: &'static str) {
        self.tokenizer_checks.get_or_create(&ResultLabels { result }).inc();
    }

    /// A request was re-picked.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// The key file was read again on SIGHUP.
    pub fn key_reload(&self, ok: bool) {
        self.key_reloads.get_or_create(&OutcomeLabels { outcome: if ok { "ok" } else { "error" } }).inc();
    }

    /// TLS files (`which`: listener, control) were read again on SIGHUP.
    pub fn tls_reload(&self, which: &'static str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.tls_reloads.get_or_create(&TlsReloadLabels { which, outcome }).inc();
    }

    /// A request without a listed key.
    pub fn unauthorized(&self) {
        self.unauthorized.inc();
    }

    /// A request of the key named `key` was let through or rate limited.
    pub fn key_request(&self, key: &str, outcome: &'static str) {
        self.key_requests.get_or_create(&KeyLabels { key: key.to_owned(), outcome }).inc();
    }

    /// Requests waiting for a place now.
    pub fn queue_depth(&self, n: usize) {
        self.queue_depth.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A queued request waited `d`.
    pub fn queue_wait(&self, d: std::time::Duration) {
        self.queue_wait.observe(d.as_secs_f64());
    }

    /// A request was answered 503 overloaded for `reason`.
    pub fn rejected(&self, reason: &'static str) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }
}

/// Keeps one request counted in `infera_proxy_inflight_requests`.
#[derive(Debug)]
pub struct InflightGuard(Arc<ProxyMetrics>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.inflight.dec();
    }
}

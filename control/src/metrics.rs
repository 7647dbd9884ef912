//! Prometheus metrics of the control service, registered once and passed down, and the
//! `/metrics` HTTP endpoint (OpenMetrics text).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use infera_proto::types::{ModelName, PickKind, ReleaseReason, Role};
use infera_runtime::serve::{Drain, Listening, Plain, serve_http};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::engine_facts::discovery::DiscoveryMetrics;
use crate::routing::LoadChange;

pub mod admission;
mod prefix_hits;
mod view;

pub use prefix_hits::{PrefillPickTokens, PrefixHitMetrics};

pub use view::ViewMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PickLabels {
    kind: &'static str,
    mode: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReleaseLabels {
    kind: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgreementLabels {
    agreement: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    bound: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdentityLabels {
    identity: String,
}

/// The control service's metrics.
#[derive(Debug)]
pub struct ControlMetrics {
    decode_requests: Family<TargetLabels, Gauge>,
    decode_tokens: Family<TargetLabels, Gauge>,
    prefill_requests: Family<TargetLabels, Gauge>,
    prefill_tokens: Family<TargetLabels, Gauge>,
    picks: Family<PickLabels, Counter>,
    pick_seconds: Family<KindLabels, Histogram>,
    releases: Family<ReleaseLabels, Counter>,
    repeated_releases: Counter,
    lease_expiries: Counter,
    leases: Gauge,
    shadow: Family<AgreementLabels, Counter>,
    registry_changes: Family<RegistryLabels, Counter>,
    discovery: DiscoveryMetrics,
    /// Session affinity's map.
    pub sessions: crate::affinity::SessionMetrics,
    /// The KV prefix hits of prefill picks.
    pub prefix_hits: PrefixHitMetrics,
    /// Fleet admission.
    pub admission: admission::AdmissionMetrics,
    prefill_phase_median: Family<ModelLabels, Gauge<f64, AtomicU64>>,
    view: ViewMetrics,
    foreign_ids: Family<RpcLabels, Counter>,
    bound_refusals: Family<BoundLabels, Counter>,
    identity_leases: Family<IdentityLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegistryLabels {
    kind: &'static str,
}

impl ControlMetrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            decode_requests: Family::default(),
            decode_tokens: Family::default(),
            prefill_requests: Family::default(),
            prefill_tokens: Family::default(),
            picks: Family::default(),
            pick_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(5e-6, 2.0, 20))),
            releases: Family::default(),
            repeated_releases: Counter::default(),
            lease_expiries: Counter::default(),
            leases: Gauge::default(),
            shadow: Family::default(),
            registry_changes: Family::default(),
            discovery: DiscoveryMetrics::default(),
            sessions: Default::default(),
            prefix_hits: PrefixHitMetrics::default(),
            admission: admission::AdmissionMetrics::default(),
            prefill_phase_median: Family::default(),
            view: ViewMetrics::default(),
            foreign_ids: Family::default(),
            bound_refusals: Family::default(),
            identity_leases: Family::default(),
        };
        for bound in ["leases", "redeclare_bytes", "redeclare_over_capacity"] {
            let _created = m.bound_refusals.get_or_create(&BoundLabels { bound });
        }
        // Every release series exists from the start (at 0), so rates work from the first scrape.
        for kind in [PickKind::Prefill, PickKind::Decode] {
            for reason in ReleaseReason::ALL {
                let _created =
                    m.releases.get_or_create(&ReleaseLabels { kind: kind.as_str(), reason: reason.as_str() });
            }
        }
        let r = registry.sub_registry_with_prefix("infera_router");
        r.register("decode_demand_requests", "Requests held per decode target", m.decode_requests.clone());
        r.register("decode_demand_tokens", "Input tokens booked per decode target", m.decode_tokens.clone());
        r.register("prefill_demand_requests", "Requests held per prefill target", m.prefill_requests.clone());
        r.register(
            "prefill_demand_tokens",
            "Input tokens booked per prefill target",
            m.prefill_tokens.clone(),
        );
        r.register("picks", "Picks by kind, demand mode and outcome", m.picks.clone());
        m.sessions.register(r);
        m.prefix_hits.register(r);
        m.admission.register(r);
        r.register("pick_duration_seconds", "Time to pick and book, inside control", m.pick_seconds.clone());
        r.register("releases", "Reservations ended, by kind and reason", m.releases.clone());
        r.register(
            "repeated_releases",
            "Releases of reservations that had already ended",
            m.repeated_releases.clone(),
        );
        r.register("lease_expiries", "Proxy leases that expired", m.lease_expiries.clone());
        r.register("leases", "Open proxy leases", m.leases.clone());
        r.register(
            "registry_changes",
            "Worker changes applied from the registry (etcd), by kind: upsert, remove, refused (a record that is no valid worker, ignored)",
            m.registry_changes.clone(),
        );
        r.register(
            "workers_awaiting_engine_facts",
            "Registered workers whose /server_info has not made them routable yet (not answered, or \
             held out: its engine serves another model or role)",
            m.discovery.awaiting.clone(),
        );
        r.register(
            "engine_facts_failures",
            "Failed /server_info attempts, by worker and reason: unanswered, malformed, invalid, \
             model_mismatch, role_mismatch",
            m.discovery.failures.clone(),
        );
        r.register(
            "record_mismatches",
            "Record fields a worker's engine contradicted (control routes with the engine's), by worker \
             and field: dp_size, page_size, transfer_backend, kv_cache_dtype",
            m.discovery.mismatches.clone(),
        );
        m.view.register(r);
        r.register(
            "decode_shadow_decisions",
            "Shadow-mode decode picks: whether the legacy choice was also a lowest-cost one",
            m.shadow.clone(),
        );
        r.register(
            "prefill_phase_median_seconds",
            "Median of the model's last 256 prefill phases (a prefill reservation's booking to its EOF release)",
            m.prefill_phase_median.clone(),
        );
        r.register(
            "foreign_ids",
            "Router calls that named another identity's lease or reservation (answered NOT_FOUND, nothing \
             changed), by RPC",
            m.foreign_ids.clone(),
        );
        r.register(
            "bound_refusals",
            "Calls or legs refused by a bound: leases (--max-leases-per-identity), redeclare_bytes \
             (--max-redeclare-bytes), redeclare_over_capacity (a re-declared leg on a rank at \
             --max-requests-per-rank)",
            m.bound_refusals.clone(),
        );
        r.register(
            "identity_leases",
            "Open leases per identity (a proxy's certificate or token; `anonymous` while the Router is \
             open), against --max-leases-per-identity",
            m.identity_leases.clone(),
        );
        m
    }

    /// No identity holds a lease (a fresh ledger: a takeover or a step-down).
    pub fn clear_identity_leases(&self) {
        self.identity_leases.clear();
    }

    /// `identity` holds `n` leases now.
    pub fn identity_leases(&self, identity: &crate::identity::Identity, n: usize) {
        self.identity_leases
            .get_or_create(&IdentityLabels { identity: identity.to_string() })
            .set(to_i64(n as u64));
    }

    /// A call of `rpc` named another identity's lease or reservation.
    pub fn foreign_id(&self, rpc: &'static str) {
        self.foreign_ids.get_or_create(&RpcLabels { rpc }).inc();
    }

    /// A call (or a re-declared leg) was refused by `bound`.
    pub fn bound_refusal(&self, bound: &'static str) {
        self.bound_refusals.get_or_create(&BoundLabels { bound }).inc();
    }

    /// The engine-facts discovery's metrics (registered with these).
    pub fn discovery(&self) -> DiscoveryMetrics {
        self.discovery.clone()
    }

    /// A target's load changed.
    pub fn load(&self, change: &LoadChange) {
        let labels = TargetLabels { target: change.target.to_string() };
        let (requests, tokens) = match change.role {
            Role::Prefill => (&self.prefill_requests, &self.prefill_tokens),
            Role::Decode | Role::Mixed => (&self.decode_requests, &self.decode_tokens),
        };
        requests.get_or_create(&labels).set(to_i64(change.load.held_requests));
        tokens.get_or_create(&labels).set(to_i64(change.load.booked_input_tokens));
    }

    /// A pick ended with `outcome` after `seconds`.
    pub fn pick(&self, kind: PickKind, mode: &'static str, outcome: &'static str, seconds: f64) {
        self.picks.get_or_create(&PickLabels { kind: kind.as_str(), mode, outcome }).inc();
        self.pick_seconds.get_or_create(&KindLabels { kind: kind.as_str() }).observe(seconds);
    }

    /// The worker view's gauges (targets, unpaired workers).
    pub fn view(&self) -> &ViewMetrics {
        &self.view
    }

    /// A shadow decode pick agreed (or not) with the cost.
    pub fn shadow(&self, agree: bool) {
        let agreement = if agree { "agree" } else { "disagree" };
        self.shadow.get_or_create(&AgreementLabels { agreement }).inc();
    }

    /// A reservation ended.
    pub fn release(&self, kind: PickKind, reason: ReleaseReason) {
        self.releases.get_or_create(&ReleaseLabels { kind: kind.as_str(), reason: reason.as_str() }).inc();
    }

    /// A prefill of `model` completed; `median` is the model's median phase with it.
    pub fn prefill_phase_median(&self, model: &ModelName, median: Duration) {
        self.prefill_phase_median
            .get_or_create(&ModelLabels { model: model.to_string() })
            .set(median.as_secs_f64());
    }

    /// A release named a reservation that had already ended.
    pub fn repeated_release(&self) {
        self.repeated_releases.inc();
    }

    /// A registry change was applied.
    pub fn registry_change(&self, kind: &'static str) {
        self.registry_changes.get_or_create(&RegistryLabels { kind }).inc();
    }

    /// A lease expired.
    pub fn lease_expired(&self) {
        self.lease_expiries.inc();
    }

    /// The number of open leases.
    pub fn leases(&self, n: usize) {
        self.leases.set(to_i64(n as u64));
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankLabels {
    worker: String,
    rank: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlockLabels {
    outcome: &'static str,
}

/// Subscriber counters moved into the metrics at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvCounters {
    /// Batches delivered.
    pub batches: u64,
    /// Sequence gaps.
    pub gaps: u64,
    /// Replay requests.
    pub replays: u64,
    /// Resets (the target's index rebuilt).
    pub resets: u64,
    /// Malformed frames or payloads.
    pub malformed: u64,
}

/// The KV-event feed's and the prefix index's metrics (`infera_kv_*`).
#[derive(Debug, Default)]
pub struct KvMetrics {
    batches: Family<RankLabels, Counter>,
    gaps: Family<RankLabels, Counter>,
    replays: Family<RankLabels, Counter>,
    resets: Family<RankLabels, Counter>,
    malformed: Family<RankLabels, Counter>,
    blocks: Family<BlockLabels, Counter>,
    subscribers: Gauge,
    index_blocks: Gauge,
    index_bytes: Gauge,
    index_rehashed_blocks: Gauge,
    index_max_blocks: Gauge,
    last: std::sync::Mutex<infera_kv::index::IngestCounts>,
}

impl KvMetrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("infera_kv");
        r.register("batches", "KV event batches received, per worker and rank", m.batches.clone());
        r.register("sequence_gaps", "Sequence gaps seen, per worker and rank", m.gaps.clone());
        r.register("replays", "Replay requests made after gaps, per worker and rank", m.replays.clone());
        r.register(
            "resets",
            "Times a target's index was dropped and rebuilt (lost events), per worker and rank",
            m.resets.clone(),
        );
        r.register("malformed", "Malformed frames or payloads, per worker and rank", m.malformed.clone());
        r.register(
            "blocks",
            "Blocks by what ingest did: stored, removed, orphaned (parent unknown), over_budget, \
             unknown_removal, other_medium",
            m.blocks.clone(),
        );
        r.register("subscribers", "Rank subscribers running", m.subscribers.clone());
        r.register("index_blocks", "Blocks the prefix index holds", m.index_blocks.clone());
        r.register("index_bytes", "Approximate memory of the prefix index", m.index_bytes.clone());
        r.register(
            "index_rehashed_blocks",
            "Of the index's blocks, those keyed by hashing their tokens (engine hashes no router can \
             compute: a LoRA adapter's namespace, format dynamo), each with a digest kept",
            m.index_rehashed_blocks.clone(),
        );
        r.register("index_max_blocks", "The prefix index's block budget", m.index_max_blocks.clone());
        m
    }

    /// One subscriber's counters since the last export.
    pub fn subscriber(&self, worker: &str, rank: u32, d: &KvCounters) {
        let l = RankLabels { worker: worker.to_owned(), rank };
        for (family, n) in [
            (&self.batches, d.batches),
            (&self.gaps, d.gaps),
            (&self.replays, d.replays),
            (&self.resets, d.resets),
            (&self.malformed, d.malformed),
        ] {
            family.get_or_create(&l).inc_by(n);
        }
    }

    /// The index's size and what ingest did since the last call.
    pub fn index(&self, stats: &infera_kv::index::IndexStats, subscribers: usize) {
        self.subscribers.set(to_i64(subscribers as u64));
        self.index_blocks.set(to_i64(stats.blocks as u64));
        self.index_bytes.set(to_i64(stats.bytes as u64));
        self.index_rehashed_blocks.set(to_i64(stats.rehashed as u64));
        self.index_max_blocks.set(to_i64(stats.max_blocks as u64));
        let mut last = self.last.lock().expect("kv metrics poisoned by an earlier panic");
        let (now, was) = (stats.counts, *last);
        for (outcome, n) in [
            ("stored", now.stored - was.stored),
            ("removed", now.removed - was.removed),
            ("orphaned", now.orphans - was.orphans),
            ("over_budget", now.over_budget - was.over_budget),
            ("unknown_removal", now.unknown_removals - was.unknown_removals),
            ("other_medium", now.other_medium - was.other_medium),
        ] {
            self.blocks.get_or_create(&BlockLabels { outcome }).inc_by(n);
        }
        *last = now;
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// How long an open scrape gets once control stops.
const SCRAPE_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether this control may take traffic, for `GET /readiness`: `Ok(role)` once it has read
/// the registry (leader, follower or standalone alike: a follower answers with the leader's
/// address and forwards Admin), `Err(why)` before.
pub type Readiness = Arc<dyn Fn() -> Result<&'static str, &'static str> + Send + Sync>;

/// Serves `GET /metrics`, `/health` and `/readiness` on `listener` until `shutdown` resolves,
/// on the accept loop every infera server shares.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Readiness,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let handler = move |req: Request<Incoming>| {
        let (registry, readiness) = (registry.clone(), readiness.clone());
        async move { respond(&req, &registry, &readiness) }
    };
    let listening = Listening::new(infera_runtime::serve::ConnLimits::DEFAULT);
    serve_http(listener, Plain, handler, shutdown, Drain::For(SCRAPE_DRAIN), listening).await;
}

fn respond(req: &Request<Incoming>, registry: &Registry, readiness: &Readiness) -> Response<Full<Bytes>> {
    let reply = |status, ctype: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ctype));
        r
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => {
                    reply(StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", text)
                }
                Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", e.to_string()),
            }
        }
        (&Method::GET, "/health") => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, "/readiness") => match readiness() {
            Ok(role) => reply(StatusCode::OK, "text/plain", format!("ready {role}\n")),
            Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("not ready: {why}\n")),
        },
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found; try /metrics\n".into()),
    }
}

//! The replica set's metrics: who leads, takeovers, how warm a new leader's ledger is, the legs
//! proxies re-declared, and the calls refused because this control does not lead.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use infera_proto::types::PickKind;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RedeclaredLabels {
    kind: &'static str,
    /// `control`: an earlier control had booked it; `fallback`: a local fallback pick.
    origin: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc: &'static str,
}

/// The metrics of the leadership and the warm rebuild.
#[derive(Debug, Default)]
pub struct LeaderMetrics {
    leader: Gauge,
    epoch: Gauge,
    warm: Gauge,
    takeovers: Counter,
    redeclared: Family<RedeclaredLabels, Counter>,
    unknown_targets: Counter,
    redeclares: Counter,
    not_leader: Family<RpcLabels, Counter>,
}

impl LeaderMetrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        for kind in [PickKind::Prefill, PickKind::Decode] {
            for origin in ["control", "fallback"] {
                let _created = m.redeclared.get_or_create(&RedeclaredLabels { kind: kind.as_str(), origin });
            }
        }
        let r = registry.sub_registry_with_prefix("infera_router");
        r.register("leader", "1 while this control leads (or runs without etcd), else 0", m.leader.clone());
        r.register(
            "leader_epoch",
            "The leader's term (the epoch of its ids) as this control knows it",
            m.epoch.clone(),
        );
        r.register(
            "ledger_warm",
            "1 once this leader's ledger holds what the proxies hold (all re-declared, or a lease TTL since it took over)",
            m.warm.clone(),
        );
        r.register("leader_takeovers", "Times this control became the leader", m.takeovers.clone());
        r.register(
            "redeclared",
            "Legs proxies re-declared, by kind and origin (control: booked by an earlier control; fallback: a local pick)",
            m.redeclared.clone(),
        );
        r.register(
            "redeclare_unknown_targets",
            "Re-declared legs not booked because their target is not in the view",
            m.unknown_targets.clone(),
        );
        r.register("redeclare_calls", "Redeclare calls answered", m.redeclares.clone());
        r.register(
            "not_leader_refusals",
            "Router calls refused because this control does not lead, by RPC",
            m.not_leader.clone(),
        );
        m
    }

    /// The role and term now.
    pub fn leadership(&self, leads: bool, epoch: u32) {
        self.leader.set(i64::from(leads));
        self.epoch.set(i64::from(epoch));
    }

    /// Whether the ledger is warm.
    pub fn warm(&self, warm: bool) {
        self.warm.set(i64::from(warm));
    }

    /// This control took over.
    pub fn takeover(&self) {
        self.takeovers.inc();
    }

    /// One re-declared leg booked.
    pub fn redeclared(&self, kind: PickKind, was_booked: bool) {
        let origin = if was_booked { "control" } else { "fallback" };
        self.redeclared.get_or_create(&RedeclaredLabels { kind: kind.as_str(), origin }).inc();
    }

    /// One re-declared leg whose target is unknown.
    pub fn unknown_target(&self) {
        self.unknown_targets.inc();
    }

    /// One Redeclare call answered.
    pub fn redeclare_call(&self) {
        self.redeclares.inc();
    }

    /// A Router call refused: not the leader.
    pub fn not_leader(&self, rpc: &'static str) {
        self.not_leader.get_or_create(&RpcLabels { rpc }).inc();
    }
}

//! Per-target gauges of the engine readings, beside the ledger's `*_demand_*` gauges:
//! `infera_router_engine_running_requests`, `…_queued_requests` (SGLang's waiting count, which
//! includes its disaggregation queues, plus a prefill's in-flight transfers), `…_used_tokens`, `…_max_tokens`, `…_reading_age_seconds`, and
//! `infera_router_demand_drift_requests` (held − running − queued).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Reading;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: String,
}

/// The engine gauges.
#[derive(Debug)]
pub struct EngineMetrics {
    running: Family<TargetLabels, Gauge>,
    queued: Family<TargetLabels, Gauge>,
    used_tokens: Family<TargetLabels, Gauge>,
    max_tokens: Family<TargetLabels, Gauge>,
    age: Family<TargetLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    drift: Family<TargetLabels, Gauge>,
}

/// One target's row for the gauges: what the ledger holds and what its engine said.
#[derive(Debug)]
pub struct Row<'a> {
    /// The target, as its label.
    pub target: String,
    /// Requests the ledger holds on it.
    pub held: u64,
    /// Its latest reading.
    pub reading: Option<&'a Reading>,
}

impl EngineMetrics {
    /// Registers the gauges under `infera_router_`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            running: Family::default(),
            queued: Family::default(),
            used_tokens: Family::default(),
            max_tokens: Family::default(),
            age: Family::default(),
            drift: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("infera_router");
        r.register(
            "engine_running_requests",
            "Requests the engine runs, per target (GET /v1/loads)",
            m.running.clone(),
        );
        r.register(
            "engine_queued_requests",
            "Requests the engine holds outside its running batch (num_waiting_reqs, which counts the disaggregation queues, + prefill in-flight), per target",
            m.queued.clone(),
        );
        r.register("engine_used_tokens", "KV tokens in use, per target", m.used_tokens.clone());
        r.register("engine_max_tokens", "KV capacity in tokens, per target", m.max_tokens.clone());
        r.register(
            "engine_reading_age_seconds",
            "Age of the latest engine reading, per target",
            m.age.clone(),
        );
        r.register(
            "demand_drift_requests",
            "Requests the ledger holds minus those the engine runs and queues, per target",
            m.drift.clone(),
        );
        m
    }

    /// Sets every target's gauges; a target without a reading gets none (its series stay
    /// absent rather than claim 0).
    pub fn export(&self, rows: &[Row<'_>], now: std::time::Instant) {
        for row in rows {
            let Some(reading) = row.reading else { continue };
            let labels = TargetLabels { target: row.target.clone() };
            let load = reading.load;
            self.running.get_or_create(&labels).set(to_i64(load.running));
            self.queued.get_or_create(&labels).set(to_i64(load.queued()));
            self.used_tokens.get_or_create(&labels).set(to_i64(load.used_tokens));
            self.max_tokens.get_or_create(&labels).set(to_i64(load.max_total_tokens));
            self.age.get_or_create(&labels).set(now.saturating_duration_since(reading.at).as_secs_f64());
            self.drift.get_or_create(&labels).set(to_i64(row.held) - to_i64(load.holding()));
        }
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

//! The client listener's connections as gauges, read from its gate at every scrape:
//! `infera_proxy_connections_open`, `infera_proxy_connections_refused_total` (closed at the
//! `--max-connections` cap) and `infera_proxy_accept_errors_total` (e.g. out of file
//! descriptors).

use std::sync::Arc;

use infera_runtime::serve::Gate;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The gauges and the gate they show.
#[derive(Debug)]
pub struct ConnectionMetrics {
    gate: Arc<Gate>,
    open: Gauge,
    refused: Gauge,
    accept_errors: Gauge,
}

impl ConnectionMetrics {
    /// Registers the gauges of `gate` in `registry`.
    pub fn register(registry: &mut Registry, gate: Arc<Gate>) -> Self {
        let m =
            Self { gate, open: Gauge::default(), refused: Gauge::default(), accept_errors: Gauge::default() };
        let r = registry.sub_registry_with_prefix("infera_proxy");
        r.register("connections_open", "Client connections open now", m.open.clone());
        r.register(
            "connections_refused_total",
            "Client connections closed at once because --max-connections were open (a gauge of a count)",
            m.refused.clone(),
        );
        r.register(
            "accept_errors_total",
            "Failed accepts on the client listener, e.g. out of file descriptors (a gauge of a count)",
            m.accept_errors.clone(),
        );
        m
    }

    /// Copies the gate's counters into the gauges (before an export).
    pub fn refresh(&self) {
        let c = self.gate.counts();
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.open.set(gauge(c.open));
        self.refused.set(gauge(c.refused));
        self.accept_errors.set(gauge(c.accept_errors));
    }
}

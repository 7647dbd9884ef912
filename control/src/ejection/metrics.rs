//! Outlier ejection's metrics: failed legs by kind, ejections and re-admissions, probes, picks
//! that had to ignore the ejections, and which targets are ejected now.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use infera_proto::types::{LegFailure, Target};

use super::Transition;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: String,
}

/// The metrics of outlier ejection.
#[derive(Debug, Default)]
pub struct EjectionMetrics {
    leg_failures: Family<KindLabels, Counter>,
    ejections: Family<CauseLabels, Counter>,
    readmissions: Counter,
    probes: Counter,
    bypassed: Counter,
    ejected: Family<TargetLabels, Gauge>,
    discounted: Counter,
}

impl EjectionMetrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        for kind in LegFailure::ALL {
            let _created = m.leg_failures.get_or_create(&KindLabels { kind: kind.as_str() });
        }
        let r = registry.sub_registry_with_prefix("infera_router");
        r.register(
            "leg_failures",
            "Legs proxies released as failed, by how they failed",
            m.leg_failures.clone(),
        );
        r.register(
            "ejections",
            "Targets ejected for failing (from healthy or after a failed probe), by the last failure",
            m.ejections.clone(),
        );
        r.register(
            "readmissions",
            "Ejected targets healthy again after their probes",
            m.readmissions.clone(),
        );
        r.register(
            "ejection_probes",
            "Picks let through to a half-open target as its probe",
            m.probes.clone(),
        );
        r.register(
            "ejection_bypassed",
            "Picks that ignored the ejections because every target of the pool was ejected or excluded",
            m.bypassed.clone(),
        );
        r.register("target_ejected", "1 while the target is ejected or probing", m.ejected.clone());
        r.register(
            "discounted_failures",
            "Failure reports that counted for nothing towards an ejection: another identity had used the \
             target without a failure within --eject-witness-window-ms",
            m.discounted.clone(),
        );
        m
    }

    /// `n` failure reports were discounted.
    pub fn discounted(&self, n: usize) {
        if n > 0 {
            self.discounted.inc_by(n as u64);
        }
    }

    /// A leg failed with `kind`.
    pub fn leg_failure(&self, kind: LegFailure) {
        self.leg_failures.get_or_create(&KindLabels { kind: kind.as_str() }).inc();
    }

    /// `target`'s breaker changed.
    pub fn transition(&self, target: &Target, t: Transition) {
        let labels = TargetLabels { target: target.to_string() };
        match t {
            Transition::Ejected { open, cause, reprobed } => {
                tracing::warn!(%target, cause = cause.as_str(), open_s = open.as_secs(), reprobed, "target ejected");
                self.ejections.get_or_create(&CauseLabels { cause: cause.as_str() }).inc();
                self.ejected.get_or_create(&labels).set(1);
            }
            Transition::Readmitted => {
                tracing::info!(%target, "target healthy again");
                self.readmissions.inc();
                self.ejected.get_or_create(&labels).set(0);
            }
        }
    }

    /// A probe was let through.
    pub fn probe(&self) {
        self.probes.inc();
    }

    /// A pick ignored the ejections.
    pub fn bypassed(&self) {
        self.bypassed.inc();
    }
}

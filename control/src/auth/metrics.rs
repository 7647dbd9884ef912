//! What the Router's authentication exports: whether it is on, the calls it refused and why, and
//! the tokens file's reloads.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// `infera_control_router_*`.
#[derive(Clone, Debug, Default)]
pub struct AuthMetrics {
    authenticated: Gauge,
    refused: Family<ReasonLabels, Counter>,
    reloads: Family<OutcomeLabels, Counter>,
}

impl AuthMetrics {
    /// Registers the metrics in `registry`; `authenticated` says whether Router calls need a
    /// credential.
    pub fn register(registry: &mut Registry, authenticated: bool) -> Self {
        let m = Self::default();
        m.authenticated.set(i64::from(authenticated));
        for reason in super::Refusal::ALL {
            let _created = m.refused.get_or_create(&ReasonLabels { reason: reason.as_str() });
        }
        let r = registry.sub_registry_with_prefix("infera_control_router");
        r.register(
            "authenticated",
            "1 when every Router call needs a credential (a client certificate or a proxy token), 0 when \
             the Router is open to anyone who reaches it",
            m.authenticated.clone(),
        );
        r.register(
            "unauthenticated",
            "Router calls refused with UNAUTHENTICATED, by reason: missing, malformed, unknown_token, \
             no_identity",
            m.refused.clone(),
        );
        r.register(
            "token_reloads",
            "Reloads of --router-tokens on SIGHUP, by outcome: ok, error (the tokens in force stay)",
            m.reloads.clone(),
        );
        m
    }

    /// A call was refused for `reason`.
    pub fn refused(&self, reason: super::Refusal) {
        self.refused.get_or_create(&ReasonLabels { reason: reason.as_str() }).inc();
    }

    /// The tokens file was read again.
    pub fn reloaded(&self, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&OutcomeLabels { outcome }).inc();
    }
}

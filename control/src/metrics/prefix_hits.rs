//! How much of their prompts prefill picks find cached: the KV prefix hit ratio of KV-aware
//! routing, and the picks it could not make KV-aware (no page hashes: the proxy has no tokenizer
//! for the model, or its rendering differs from the worker's, `manual/features/kv_aware_routing.md`).
//!
//! `rate(…_cached_tokens_total) / rate(…_prompt_tokens_total)` is the hit ratio of the chosen
//! targets; the same over `…_best_cached_tokens_total` is what the best-placed candidate held,
//! so the gap between them is what load balancing gave up for load.

use infera_proto::types::ModelName;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrefixLabels {
    model: String,
    /// `hashed`: the pick carried page hashes; `unhashed`: it was routed on load (and session).
    prompt: &'static str,
}

/// One prefill pick, as the prefix metrics count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillPickTokens {
    /// Whether the request carried page hashes.
    pub hashed: bool,
    /// Its prompt tokens.
    pub prompt: u64,
    /// Tokens the chosen target was credited as holding.
    pub cached: u64,
    /// The most any candidate was credited as holding.
    pub best_cached: u64,
}

/// `infera_router_prefill_pick_{prompt,cached,best_cached}_tokens_total{model, prompt}` and
/// `infera_router_prefill_picks_total{model, prompt}`.
#[derive(Debug, Default)]
pub struct PrefixHitMetrics {
    picks: Family<PrefixLabels, Counter>,
    prompt: Family<PrefixLabels, Counter>,
    cached: Family<PrefixLabels, Counter>,
    best_cached: Family<PrefixLabels, Counter>,
}

impl PrefixHitMetrics {
    /// Registers the families in `r` (the `infera_router` sub-registry).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "prefill_picks",
            "Prefill picks per model; prompt=hashed carried page hashes (KV-aware), prompt=unhashed \
             was routed on load and session alone",
            self.picks.clone(),
        );
        r.register("prefill_pick_prompt_tokens", "Prompt tokens of prefill picks", self.prompt.clone());
        r.register(
            "prefill_pick_cached_tokens",
            "Prompt tokens the chosen prefill target held already (the KV prefix hits of the picks)",
            self.cached.clone(),
        );
        r.register(
            "prefill_pick_best_cached_tokens",
            "Prompt tokens the best-placed prefill candidate held (what a pick on cache alone would hit)",
            self.best_cached.clone(),
        );
    }

    /// Counts one prefill pick of `model`.
    pub fn pick(&self, model: &ModelName, t: PrefillPickTokens) {
        let labels =
            PrefixLabels { model: model.to_string(), prompt: if t.hashed { "hashed" } else { "unhashed" } };
        self.picks.get_or_create(&labels).inc();
        self.prompt.get_or_create(&labels).inc_by(t.prompt);
        self.cached.get_or_create(&labels).inc_by(t.cached);
        self.best_cached.get_or_create(&labels).inc_by(t.best_cached);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn counts_hits_per_model_and_keeps_unhashed_picks_apart() {
        let mut registry = Registry::default();
        let m = PrefixHitMetrics::default();
        m.register(registry.sub_registry_with_prefix("infera_router"));
        let model = ModelName::new("m");
        m.pick(&model, PrefillPickTokens { hashed: true, prompt: 1000, cached: 640, best_cached: 960 });
        m.pick(&model, PrefillPickTokens { hashed: true, prompt: 500, cached: 0, best_cached: 0 });
        m.pick(&model, PrefillPickTokens { hashed: false, prompt: 300, cached: 200, best_cached: 200 });
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            r#"infera_router_prefill_picks_total{model="m",prompt="hashed"} 2"#,
            r#"infera_router_prefill_pick_prompt_tokens_total{model="m",prompt="hashed"} 1500"#,
            r#"infera_router_prefill_pick_cached_tokens_total{model="m",prompt="hashed"} 640"#,
            r#"infera_router_prefill_pick_best_cached_tokens_total{model="m",prompt="hashed"} 960"#,
            r#"infera_router_prefill_picks_total{model="m",prompt="unhashed"} 1"#,
            r#"infera_router_prefill_pick_cached_tokens_total{model="m",prompt="unhashed"} 200"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}

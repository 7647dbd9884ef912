//! Render parity: whether the proxy renders and encodes chat prompts as each worker does. KV-aware
//! prefill picks hash the token ids the proxy renders (with the model's tokenizer); when its chat template or
//! its defaults differ from a worker's, those hashes never match what the worker caches, and
//! KV-aware routing silently becomes load-only — or worse, credits the wrong pages.
//!
//! So each worker of a model is probed when it first appears and every
//! `--render-parity-interval-ms`: a fixed set of conversations ([`CONVERSATIONS`]) is tokenized
//! by the proxy as a chat completion and by the worker's own `POST /v1/tokenize` with the same
//! messages (SGLang renders them as for a chat completion:
//! python/sglang/srt/entrypoints/openai/serving_tokenize.py). The verdict is exported as
//! `infera_render_parity{worker,model}` (1: the same ids; 0: not), and a worker whose ids differ
//! is logged with the conversation and the first differing token. While a prefill (or an
//! aggregated worker) of a model renders apart, the model's chat prompts carry no token ids to
//! control ([`Parity::renders_apart`]): its prefill picks go on load, never on wrong hashes. A
//! PD decode's verdict is exported only: no pick hashes its cache. A worker that cannot be
//! probed (no `/v1/tokenize`, unreachable) has no verdict and changes nothing.

mod probe;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use infera_proto::types::{Api, ModelName, Role, WorkerId};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub use probe::spawn;

use crate::facts::Facts;
use crate::targets::TargetList;

/// The conversations every worker is probed with: a bare question, a system prompt, and turns.
pub const CONVERSATIONS: [&str; 3] = [
    r#"[{"role": "user", "content": "What is the capital of France?"}]"#,
    r#"[{"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "List three prime numbers."}]"#,
    r#"[{"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Explain prefill and decode in one sentence."}]"#,
];

/// Where two renderings of one conversation part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The first position whose ids differ (or where one ends).
    pub at: usize,
    /// The proxy's id there (`None`: its rendering ended).
    pub proxy: Option<u32>,
    /// The worker's id there (`None`: its rendering ended).
    pub worker: Option<u32>,
}

/// The first difference between the proxy's and a worker's ids, if any.
pub fn compare(proxy: &[u32], worker: &[u32]) -> Option<Difference> {
    let at = proxy.iter().zip(worker).position(|(p, w)| p != w).unwrap_or(proxy.len().min(worker.len()));
    (at < proxy.len().max(worker.len())).then(|| Difference {
        at,
        proxy: proxy.get(at).copied(),
        worker: worker.get(at).copied(),
    })
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ParityLabels {
    worker: String,
    model: String,
}

/// A worker's last probe.
#[derive(Clone, Debug)]
struct Probed {
    model: ModelName,
    /// Its role: only the workers whose caches the page hashes address (prefill, aggregated)
    /// turn the hashes off.
    role: Role,
    /// `Some(true)`: the same ids; `Some(false)`: different; `None`: not probed successfully.
    same: Option<bool>,
    at: Instant,
}

/// Every worker's render parity.
#[derive(Debug, Default)]
pub struct Parity {
    workers: Mutex<HashMap<WorkerId, Probed>>,
    gauge: Family<ParityLabels, Gauge>,
    routed_on_load: Counter,
}

impl Parity {
    /// Registers `infera_render_parity` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let parity = Self::default();
        registry.register(
            "infera_render_parity",
            "1 when the proxy tokenizes the probe conversations as the worker does (its /v1/tokenize), \
             0 when not (the model's chat prompts then route on load), by worker and model",
            parity.gauge.clone(),
        );
        registry.register(
            "infera_render_parity_routed_on_load",
            "Chat prompts sent to control without their token ids because a worker of their model renders apart",
            parity.routed_on_load.clone(),
        );
        parity
    }

    /// Takes the token ids off a chat prompt (`/v1/chat/completions`, `/v1/responses`,
    /// `/v1/messages`) whose model has a worker that renders apart: its prefill pick then
    /// carries no page hashes.
    /// The exact token count stays. Other prompts are not rendered with the chat template.
    pub fn guard(&self, facts: &mut Facts, list: &TargetList) {
        if facts.token_ids.is_none()
            || !matches!(facts.api, Api::ChatCompletions | Api::Responses | Api::Messages)
        {
            return;
        }
        let model = list.model_for(facts.model.as_ref());
        if model.is_some_and(|m| self.renders_apart(&m)) {
            facts.token_ids = None;
            self.routed_on_load.inc();
        }
    }

    /// Whether some worker of `model` whose cache the page hashes address (a prefill, or an
    /// aggregated worker) renders its chat prompts apart from the proxy. A PD decode's rendering
    /// is exported but does not count: prefill picks never hash its cache.
    pub fn renders_apart(&self, model: &ModelName) -> bool {
        let workers = self.workers.lock().expect("parity lock");
        workers.values().any(|p| p.model == *model && p.role != Role::Decode && p.same == Some(false))
    }

    /// When `worker` was last probed, if ever.
    fn probed_at(&self, worker: &WorkerId) -> Option<Instant> {
        self.workers.lock().expect("parity lock").get(worker).map(|p| p.at)
    }

    /// Records a probe of `worker` (serving `model` as `role`) that ended at `at`.
    fn record(&self, worker: &WorkerId, model: &ModelName, role: Role, same: Option<bool>, at: Instant) {
        let labels = ParityLabels { worker: worker.as_str().to_owned(), model: model.as_str().to_owned() };
        match same {
            Some(s) => {
                self.gauge.get_or_create(&labels).set(i64::from(s));
            }
            None => {
                self.gauge.remove(&labels);
            }
        }
        let probed = Probed { model: model.clone(), role, same, at };
        self.workers.lock().expect("parity lock").insert(worker.clone(), probed);
    }

    /// Forgets the workers not in `present` (gone from control's list).
    fn retain(&self, present: &[WorkerId]) {
        let mut workers = self.workers.lock().expect("parity lock");
        workers.retain(|id, p| {
            let keep = present.contains(id);
            if !keep {
                let labels =
                    ParityLabels { worker: id.as_str().to_owned(), model: p.model.as_str().to_owned() };
                self.gauge.remove(&labels);
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_found_including_a_rendering_that_ends_early() {
        assert_eq!(compare(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(
            compare(&[1, 2, 3], &[1, 9, 3]),
            Some(Difference { at: 1, proxy: Some(2), worker: Some(9) })
        );
        assert_eq!(compare(&[1, 2], &[1, 2, 3]), Some(Difference { at: 2, proxy: None, worker: Some(3) }));
        assert_eq!(compare(&[1, 2, 3], &[1]), Some(Difference { at: 1, proxy: Some(2), worker: None }));
        assert_eq!(compare(&[], &[]), None);
    }

    #[test]
    fn a_model_renders_apart_while_one_of_its_workers_differs() {
        let parity = Parity::register(&mut Registry::default());
        let (m, other) = (ModelName::new("m"), ModelName::new("other"));
        let now = Instant::now();
        parity.record(&WorkerId::new("a"), &m, Role::Prefill, Some(true), now);
        parity.record(&WorkerId::new("b"), &m, Role::Prefill, None, now);
        assert!(!parity.renders_apart(&m), "an unprobed worker changes nothing");
        parity.record(&WorkerId::new("c"), &other, Role::Mixed, Some(false), now);
        assert!(!parity.renders_apart(&m) && parity.renders_apart(&other));
        parity.record(&WorkerId::new("d"), &m, Role::Decode, Some(false), now);
        assert!(!parity.renders_apart(&m), "a PD decode's cache is never hashed");
        parity.record(&WorkerId::new("b"), &m, Role::Prefill, Some(false), now);
        assert!(parity.renders_apart(&m));
        parity.retain(&[WorkerId::new("a"), WorkerId::new("d")]);
        assert!(!parity.renders_apart(&m), "gone workers are forgotten");
        let mut out = String::new();
        let mut registry = Registry::default();
        let registered = Parity::register(&mut registry);
        registered.record(&WorkerId::new("a"), &m, Role::Decode, Some(false), now);
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(out.contains(r#"infera_render_parity{worker="a",model="m"} 0"#), "{out}");
    }

    #[test]
    fn the_probe_conversations_are_chat_messages() {
        for c in CONVERSATIONS {
            let v: serde_json::Value = serde_json::from_str(c).unwrap();
            assert!(v.as_array().is_some_and(|m| m.iter().all(|m| m["role"].is_string())), "{c}");
        }
    }
}

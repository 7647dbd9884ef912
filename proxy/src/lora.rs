//! LoRA adapter names. SGLang serves an adapter of its base model to a request naming
//! `model: "base:adapter"` (`_parse_model_parameter` and `_resolve_lora_path`,
//! python/sglang/srt/entrypoints/openai/serving_base.py, 0.5.23), or naming the adapter in the
//! body's `lora_path` (OpenAI requests and `/generate`). The proxy routes such a request as one
//! of the base model: its workers, its tokenizer.
//!
//! Its KV pages are a namespace of their own, which SGLang's KV events hash in a way no router
//! can compute: SGLang appends the adapter's `lora_id` to the request's `extra_key`
//! (`Req.__init__`, python/sglang/srt/managers/schedule_batch.py), and the events hash the pages
//! after `kv_event_namespace_seed(extra_key)` (`_namespace_seed`,
//! python/sglang/srt/mem_cache/events.py). The `lora_id` is a fresh `uuid4` for an adapter loaded
//! at run time, and a `uuid5` of the adapter's name *and path* for one of `--lora-paths`
//! (`LoRARef`, python/sglang/srt/lora/lora_registry.py): the name a request carries does not
//! determine it. The events name the adapter (0.5.23's `lora_name`), though, so control's index
//! keys its blocks by their tokens after infera's own seed for the adapter
//! (`infera_kv::hash::adapter_seed`), and the proxy hashes the adapter's prompts after the same
//! seed: a prompt is credited only with pages its own adapter stored
//! (manual/features/kv_aware_routing.md, "LoRA adapters").

use std::fmt;
use std::sync::Arc;

use infera_proto::types::ModelName;
use serde_json::{Map, Value};

/// A LoRA adapter's name, as a request names it after its base model (`base:adapter`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AdapterName(Arc<str>);

impl AdapterName {
    /// Wraps a name.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AdapterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AdapterName({:?})", &*self.0)
    }
}

/// Whether (and how) a request asks for a LoRA adapter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Adapter {
    /// The base model's weights.
    #[default]
    None,
    /// One adapter, named in `model` (`base:adapter`) or in `lora_path`.
    Named(AdapterName),
    /// A `lora_path` list, one adapter per prompt of a batch.
    PerPrompt,
}

impl Adapter {
    /// Whether an adapter serves the prompt.
    pub fn is_some(&self) -> bool {
        !matches!(self, Self::None)
    }

    /// The adapter the body's `lora_path` names, when `model` named none (SGLang's priority:
    /// the model parameter, then `lora_path`).
    pub fn in_body(body: &Map<String, Value>) -> Self {
        match body.get("lora_path") {
            Some(Value::String(s)) if !s.trim().is_empty() => Self::Named(AdapterName::new(s.trim())),
            Some(Value::Array(list)) if list.iter().any(|v| v.as_str().is_some_and(|s| !s.is_empty())) => {
                Self::PerPrompt
            }
            _ => Self::None,
        }
    }
}

/// What a request's `model` names: a served model, or an adapter of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The model whose workers and tokenizer serve the request.
    pub base: ModelName,
    /// The adapter, when `model` named one.
    pub adapter: Adapter,
}

/// Splits `named` as SGLang's `_parse_model_parameter` does, given the models the deployment
/// serves: a served name is itself, even with a colon (an object-storage URI); a name
/// that starts with a served one and a colon is that model's adapter (the longest such model);
/// else the text before the first colon is the base, if it is served. A name that resolves to no
/// served model is kept whole (control refuses it as unknown), and `base:` is the base model.
pub fn resolve<'a>(named: &ModelName, served: impl Iterator<Item = &'a ModelName> + Clone) -> Resolved {
    let whole = || Resolved { base: named.clone(), adapter: Adapter::None };
    let serves = |m: &str| served.clone().any(|s| s.as_str() == m);
    let text = named.as_str();
    if !text.contains(':') || serves(text) {
        return whole();
    }
    let prefixed = served
        .clone()
        .filter(|m| text.len() > m.as_str().len() && text.starts_with(m.as_str()))
        .filter(|m| text.as_bytes()[m.as_str().len()] == b':')
        .max_by_key(|m| m.as_str().len());
    let (base, adapter) = match prefixed {
        Some(m) => (m.clone(), &text[m.as_str().len() + 1..]),
        None => {
            let (base, adapter) = text.split_once(':').expect("the name has a colon");
            let base = base.trim();
            if !serves(base) {
                return whole();
            }
            (ModelName::new(base), adapter)
        }
    };
    let adapter = adapter.trim();
    let adapter = if adapter.is_empty() { Adapter::None } else { Adapter::Named(AdapterName::new(adapter)) };
    Resolved { base, adapter }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(named: &str, served: &[&str]) -> (String, Option<String>) {
        let served: Vec<ModelName> = served.iter().map(|m| ModelName::new(*m)).collect();
        let r = resolve(&ModelName::new(named), served.iter());
        let adapter = match r.adapter {
            Adapter::Named(a) => Some(a.as_str().to_owned()),
            Adapter::None => None,
            Adapter::PerPrompt => panic!("a model names one adapter"),
        };
        (r.base.as_str().to_owned(), adapter)
    }

    #[test]
    fn an_adapter_name_resolves_to_its_base_model_as_sglang_splits_it() {
        let served = ["llama", "qwen", "s3://bucket/qwen"];
        assert_eq!(resolved("llama", &served), ("llama".into(), None));
        assert_eq!(resolved("llama:sql", &served), ("llama".into(), Some("sql".into())));
        assert_eq!(resolved("llama: sql ", &served), ("llama".into(), Some("sql".into())), "stripped");
        assert_eq!(resolved("llama:a:b", &served), ("llama".into(), Some("a:b".into())), "first colon");
        assert_eq!(resolved("llama:", &served), ("llama".into(), None), "an empty adapter is none");
        // A served name with a colon is itself, and its adapters split after the whole name.
        assert_eq!(resolved("s3://bucket/qwen", &served), ("s3://bucket/qwen".into(), None));
        assert_eq!(
            resolved("s3://bucket/qwen:chat", &served),
            ("s3://bucket/qwen".into(), Some("chat".into()))
        );
        // The longest served prefix wins.
        let nested = ["a", "a:b"];
        assert_eq!(resolved("a:b:c", &nested), ("a:b".into(), Some("c".into())));
        // A name whose base is not served stays whole: control refuses it by its name.
        assert_eq!(resolved("mistral:sql", &served), ("mistral:sql".into(), None));
        assert_eq!(resolved("llamas:sql", &served), ("llamas:sql".into(), None));
    }

    #[test]
    fn lora_path_in_the_body_names_an_adapter() {
        let body = |v: Value| v.as_object().cloned().unwrap();
        let named = Adapter::in_body(&body(serde_json::json!({"lora_path": "sql"})));
        assert_eq!(named, Adapter::Named(AdapterName::new("sql")));
        assert_eq!(
            Adapter::in_body(&body(serde_json::json!({"lora_path": ["a", null]}))),
            Adapter::PerPrompt
        );
        for none in [
            serde_json::json!({}),
            serde_json::json!({"lora_path": null}),
            serde_json::json!({"lora_path": ""}),
        ] {
            assert!(!Adapter::in_body(&body(none.clone())).is_some(), "{none}");
        }
        assert!(!Adapter::in_body(&body(serde_json::json!({"lora_path": [null, ""]}))).is_some());
    }
}

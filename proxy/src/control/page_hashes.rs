//! The prompt's page hashes a KV-aware prefill pick carries (and a decode pick waiting in
//! control's admission queue, for the prefill guard): SGLang's page hash over the token
//! ids (`infera_kv::hash`), at the page size of the model's prefill workers, after the seed of the
//! request's `cache_salt` as SGLang's KV events hash a salted prompt: a salted prompt is credited
//! only with pages stored under the same salt, as SGLang's radix cache shares them. A LoRA
//! adapter's prompt is hashed after infera's seed for the adapter (`infera_kv::hash::adapter_seed`),
//! which control's index keys that adapter's blocks by: SGLang's own namespace hashes an
//! engine-internal id no router computes ([`crate::lora`]).

use infera_proto::types::{ModelName, PickKind};

use crate::facts::{CacheSalt, Facts};
use crate::lora::Adapter;
use crate::targets::TargetList;

/// Page hashes and the page size they were computed with; empty (and 0) when there are none.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct PageHashes {
    /// One hash per full page of the prompt.
    pub(super) hashes: Vec<i64>,
    /// Tokens per page (0 without hashes).
    pub(super) page_size: u32,
}

impl PageHashes {
    /// The hashes a `kind` pick of `model` carries, at its prefills' page size. A prefill pick's
    /// KV-aware cost credits them; a decode pick carries them only when it waits in control's
    /// admission queue (`waiting`), where the prefill guard credits what the prompt's prefill
    /// caches (`manual/features/service_classes.md`): a first decode pick stays small. Empty
    /// without token ids (no tokenizer, an ambiguous prompt), with a salt or an adapter per
    /// prompt, or before the target list is known.
    pub(super) fn of(
        kind: PickKind,
        waiting: bool,
        facts: &Facts,
        model: &ModelName,
        targets: &TargetList,
    ) -> Self {
        let Some(ids) = &facts.token_ids else { return Self::default() };
        if kind == PickKind::Decode && !waiting {
            return Self::default();
        }
        let adapter = match &facts.adapter {
            Adapter::None => None,
            Adapter::Named(name) => Some(name.as_str()),
            Adapter::PerPrompt => return Self::default(),
        };
        let salt = match &facts.cache_salt {
            CacheSalt::Unsalted => None,
            CacheSalt::Salted(salt) => Some(salt.as_str()),
            CacheSalt::PerPrompt => return Self::default(),
        };
        match targets.prefill_page_size(model).filter(|p| *p > 0) {
            Some(page_size) => {
                let hashes = infera_kv::hash::namespaced_page_hashes(salt, adapter, ids, page_size as usize);
                Self { hashes: hashes.into_iter().map(|h| h.0).collect(), page_size }
            }
            None => Self::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use infera_proto::pb;
    use infera_proto::types::Api;

    use super::*;

    fn list() -> TargetList {
        let worker = pb::WorkerEndpoint {
            worker_id: "p".into(),
            role: pb::Role::Prefill as i32,
            model: "base".into(),
            url: "http://p:1/".into(),
            bootstrap_port: 8998,
            dp_size: 1,
            page_size: 2,
            ..Default::default()
        };
        let target = Some(pb::Target { worker_id: "p".into(), dp_rank: 0 });
        TargetList::new(vec![pb::TargetStatus { target, worker: Some(worker), ..Default::default() }])
    }

    /// The hashes a `kind` pick (`waiting` in control's queue or not) carries of a prompt of 8
    /// tokens sent as `body`.
    fn hashes_of(kind: PickKind, waiting: bool, body: &str) -> PageHashes {
        let list = list();
        let facts = crate::facts::derive(Api::Completions, &http::HeaderMap::new(), body.as_bytes()).unwrap();
        let (model, mut facts) = facts.served_by(&list);
        facts.token_ids = Some((1..=8).collect());
        PageHashes::of(kind, waiting, &facts, &model.unwrap(), &list)
    }

    /// The prefill pick's hashes of a prompt of 8 tokens sent as `body`.
    fn hashes(body: &str) -> PageHashes {
        hashes_of(PickKind::Prefill, false, body)
    }

    #[test]
    fn a_decode_pick_carries_the_hashes_only_while_it_waits_in_controls_queue() {
        let body = r#"{"model": "base", "prompt": "x"}"#;
        assert_eq!(hashes_of(PickKind::Decode, false, body), PageHashes::default());
        let waiting = hashes_of(PickKind::Decode, true, body);
        assert_eq!(waiting, hashes(body), "the prefill pick's own hashes");
        assert_eq!((waiting.hashes.len(), waiting.page_size), (4, 2));
    }

    #[test]
    fn a_lora_adapters_prompt_is_hashed_in_the_adapters_namespace() {
        let base = hashes(r#"{"model": "base", "prompt": "x"}"#);
        assert_eq!((base.hashes.len(), base.page_size), (4, 2));
        let tokens: Vec<u32> = (1..=8).collect();
        let sql: Vec<i64> = infera_kv::hash::namespaced_page_hashes(None, Some("sql"), &tokens, 2)
            .iter()
            .map(|h| h.0)
            .collect();
        let salted: Vec<i64> = infera_kv::hash::namespaced_page_hashes(Some("t"), Some("sql"), &tokens, 2)
            .iter()
            .map(|h| h.0)
            .collect();
        assert_ne!(sql, base.hashes);
        assert_eq!(hashes(r#"{"model": "base:sql", "prompt": "x"}"#).hashes, sql);
        assert_eq!(hashes(r#"{"model": "base", "prompt": "x", "lora_path": "sql"}"#).hashes, sql);
        assert_eq!(hashes(r#"{"model": "base:sql", "prompt": "x", "cache_salt": "t"}"#).hashes, salted);
        let per_prompt = hashes(r#"{"model": "base", "prompt": "x", "lora_path": ["sql", "chat"]}"#);
        assert_eq!(per_prompt, PageHashes::default(), "an adapter per prompt: no one namespace");
        assert_eq!(
            hashes(r#"{"model": "base:", "prompt": "x"}"#),
            base,
            "an empty adapter is the base model"
        );
    }
}

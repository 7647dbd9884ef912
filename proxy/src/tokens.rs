//! The prompt's token ids in the routing facts, when the request's model has a tokenizer
//! ([`crate::tokenizers`]): rendered and encoded as SGLang will (`infera-tokenize`), reusing the
//! session's previous turn, counted in `infera_proxy_tokenize_total{outcome,model}`. With ids the input-token count is exact;
//! without them (no tokenizer, an ambiguous or skipped prompt, an error) the estimate stands
//! and the request routes on load, as before.
//!
//! Encoding is CPU work proportional to the new text (about a microsecond per token on the
//! project's machine, `infera-bench tokenize`): bodies up to [`INLINE_MAX_BODY_BYTES`] are
//! tokenized on the request's task (a few hundred microseconds at most), larger ones on the
//! blocking pool so the runtime's workers keep relaying streams meanwhile.

use std::sync::Arc;
use std::time::Instant;

use infera_proto::types::{Api, SessionKey};
use infera_tokenize::{CacheUse, Outcome, Tokenizer, Verdict};
use serde_json::{Map, Value};

use crate::facts::Facts;
use crate::metrics::ProxyMetrics;

/// Bodies up to this size are tokenized inline.
pub const INLINE_MAX_BODY_BYTES: usize = 1 << 10;

/// Sets `facts.token_ids` (and the exact `input_tokens`) when `tokenizer`, the one of the
/// request's model (`model` is its label), can tell them. `body_bytes` is the size of the request
/// body as received.
pub async fn attach(
    mut facts: Facts,
    body_bytes: usize,
    tokenizer: Option<&Arc<Tokenizer>>,
    model: &Arc<str>,
    metrics: &Arc<ProxyMetrics>,
) -> Facts {
    let Some(tokenizer) = tokenizer else {
        metrics.tokenized("none", model, None);
        return facts;
    };
    let started = Instant::now();
    let api = facts.api;
    let session = facts.session.clone();
    let result = if body_bytes <= INLINE_MAX_BODY_BYTES {
        tokenizer.tokenize(api, &facts.body, session.as_ref().map(SessionKey::as_str))
    } else {
        // The body moves to the blocking pool and back; if that task dies, its clone of the
        // Arc is dropped and the body comes back whole.
        let body = Arc::new(std::mem::take(&mut facts.body));
        let (tokenizer, shared) = (tokenizer.clone(), body.clone());
        let joined = tokio::task::spawn_blocking(move || {
            tokenizer.tokenize(api, &shared, session.as_ref().map(SessionKey::as_str))
        });
        let result = joined.await;
        facts.body = Arc::try_unwrap(body).unwrap_or_else(|b| (*b).clone());
        match result {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "tokenizing on the blocking pool failed");
                metrics.tokenized("error", model, None);
                return facts;
            }
        }
    };
    let seconds = Some(started.elapsed().as_secs_f64());
    match result {
        Ok(Outcome::Tokens(tokens)) => {
            match tokens.cache {
                CacheUse::Hit(_) => metrics.tokenize_cache(true),
                CacheUse::Miss => metrics.tokenize_cache(false),
                CacheUse::NotAsked => {}
            }
            facts.input_tokens = tokens.ids.len() as u64;
            if tokenizer.check_due() {
                check_off_path(
                    tokenizer.clone(),
                    api,
                    facts.body.clone(),
                    tokens.ids.clone(),
                    metrics.clone(),
                );
            }
            facts.token_ids = Some(tokens.ids);
            metrics.tokenized("ok", model, seconds);
        }
        Ok(Outcome::Ambiguous(why)) => {
            tracing::debug!(?why, "prompt rendering is ambiguous; routing on load");
            metrics.tokenized("ambiguous", model, seconds);
        }
        Ok(Outcome::Skipped(why)) => {
            tracing::debug!(why = why.as_str(), "prompt not tokenized");
            metrics.tokenized("skipped", model, seconds);
        }
        Err(e) => {
            tracing::debug!(error = %e, "prompt not tokenized");
            metrics.tokenized("error", model, seconds);
        }
    }
    facts
}

/// Encodes one prompt again with the reference encoder, on the blocking pool and off the
/// request's path, and compares (`--tokenizer-check-every`); a difference turns the fast encoder
/// off for the rest of the process.
fn check_off_path(
    tokenizer: Arc<Tokenizer>,
    api: Api,
    body: Map<String, Value>,
    ids: Arc<[u32]>,
    metrics: Arc<ProxyMetrics>,
) {
    tokio::task::spawn_blocking(move || match tokenizer.check(api, &body, &ids) {
        Ok(Verdict::Same) => metrics.tokenizer_checked("same"),
        Ok(Verdict::EncoderDiffers(reason)) => {
            tracing::error!(%reason, "tokenizer: the fast encoder's ids differ from tokenizers'; encoding with tokenizers from now on");
            metrics.tokenizer_checked("different");
        }
        Ok(Verdict::CacheDiffers { at }) => {
            tracing::error!(
                at,
                "tokenizer: a prompt's ids from the session cache differ from tokenizers' whole encoding; the cache's entries are dropped"
            );
            metrics.tokenizer_checked("cache_different");
        }
        Ok(Verdict::NotEncoded) => {}
        Err(e) => {
            tracing::warn!(error = %e, "tokenizer: checking a prompt's ids failed");
            metrics.tokenizer_checked("error");
        }
    });
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use http::HeaderMap;
    use infera_tokenize::fixture;
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::config::{Args, Config};
    use crate::facts;

    /// A model directory with the fixture tokenizer and a ChatML template in its config.
    fn model_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fixture::byte_level_bpe(400).save(dir.path().join("tokenizer.json"), false).unwrap();
        let config = serde_json::json!({"chat_template": fixture::CHATML});
        std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
        dir
    }

    fn metrics_text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[tokio::test]
    async fn the_tokenizer_flag_puts_token_ids_in_the_facts() {
        let dir = model_dir();
        let json = dir.path().join("tokenizer.json");
        let args = Args::try_parse_from(["infera-proxy", "--tokenizer", json.to_str().unwrap()]).unwrap();
        let config = Config::try_from(args).unwrap();
        let tokenizer =
            &config.tokenizers.get(&infera_proto::types::ModelName::new("m")).expect("loaded at start");
        let label: Arc<str> = Arc::from("m");
        let mut registry = Registry::default();
        let metrics = Arc::new(ProxyMetrics::register(&mut registry));

        let mut headers = HeaderMap::new();
        headers.insert("x-session-id", "s1".parse().unwrap());
        let mut messages = fixture::conversation(1, 1, 30, true);
        let body = serde_json::to_vec(&fixture::chat_body(&messages)).unwrap();
        let f = facts::derive(Api::ChatCompletions, &headers, &body).unwrap();
        let estimate = f.input_tokens;
        let f = attach(f, body.len(), Some(tokenizer), &label, &metrics).await;
        let ids = f.token_ids.clone().expect("token ids");
        assert_eq!(f.input_tokens, ids.len() as u64);
        assert_ne!(f.input_tokens, estimate, "the exact count replaces the estimate");
        let expected = match tokenizer.render(Api::ChatCompletions, &f.body).unwrap() {
            infera_tokenize::Rendered::Chat { text, .. } => tokenizer.encode(&text, false).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(&*ids, expected.as_slice());

        // The next turn of the session is large enough for the blocking pool and hits the cache.
        messages.push(serde_json::json!({"role": "assistant", "content": fixture::text(&mut fixture::Lcg::new(2), 300)}));
        messages.push(serde_json::json!({"role": "user", "content": "and then?"}));
        let body = serde_json::to_vec(&fixture::chat_body(&messages)).unwrap();
        assert!(body.len() > INLINE_MAX_BODY_BYTES);
        let f = facts::derive(Api::ChatCompletions, &headers, &body).unwrap();
        let f = attach(f, body.len(), Some(tokenizer), &label, &metrics).await;
        assert!(f.token_ids.as_ref().is_some_and(|t| t.starts_with(&ids[..ids.len() - 3])));
        assert_eq!(f.body.get("messages").and_then(|m| m.as_array()).map(Vec::len), Some(4), "body kept");

        // Without a tokenizer the estimate stands; a batch is skipped.
        let f = attach(
            facts::derive(Api::Completions, &headers, br#"{"model":"m","prompt":"x"}"#).unwrap(),
            0,
            None,
            &label,
            &metrics,
        )
        .await;
        assert!(f.token_ids.is_none());
        let batch = br#"{"model":"m","prompt":["a","b"]}"#;
        let f = attach(
            facts::derive(Api::Completions, &headers, batch).unwrap(),
            batch.len(),
            Some(tokenizer),
            &label,
            &metrics,
        )
        .await;
        assert!(f.token_ids.is_none());

        // The first prompt was checked against the reference, on the blocking pool (one in 1,000
        // by default: the second was not).
        let checked = r#"infera_proxy_tokenizer_checks_total{result="same"} 1"#;
        let wait = std::time::Duration::from_secs(20);
        infera_testkit::eventually(wait, "the first prompt's check", async || {
            metrics_text(&registry).contains(checked)
        })
        .await;

        let text = metrics_text(&registry);
        for line in [
            r#"infera_proxy_tokenize_total{outcome="ok",model="m"} 2"#,
            r#"infera_proxy_tokenize_total{outcome="none",model="m"} 1"#,
            r#"infera_proxy_tokenize_total{outcome="skipped",model="m"} 1"#,
            r#"infera_proxy_tokenize_cache_total{result="miss"} 1"#,
            r#"infera_proxy_tokenize_cache_total{result="hit"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }
}

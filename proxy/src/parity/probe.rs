//! The probes of [`super::Parity`]: every second, each worker of each model that control lists,
//! that has a tokenizer ([`crate::tokenizers`]) and that was never probed, or not for an
//! interval, is asked to tokenize the probe conversations, which the proxy tokenizes with that
//! model's tokenizer; the verdict is recorded. Workers gone from the list are forgotten.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, header};
use http_body_util::Full;
use infera_proto::types::{Api, ModelName};
use infera_tokenize::{Outcome, Tokenizer};

use crate::tokenizers::Tokenizers;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{CONVERSATIONS, Parity, compare};
use crate::targets::Endpoint;
use crate::upstream::{Upstreams, worker_json};

/// Probes the workers control lists, due ones every second, until `stop` fires.
pub fn spawn(
    parity: Arc<Parity>,
    tokenizers: Arc<Tokenizers>,
    up: Upstreams,
    interval: Duration,
    mut stop: watch::Receiver<()>,
) {
    tokio::spawn(async move {
        let tick = interval.min(Duration::from_secs(1));
        loop {
            probe_due(&parity, &tokenizers, &up, interval).await;
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                _ = stop.changed() => return,
            }
        }
    });
}

async fn probe_due(parity: &Parity, tokenizers: &Tokenizers, up: &Upstreams, interval: Duration) {
    let list = up.link.targets();
    if list.is_empty() {
        return;
    }
    let mut present = Vec::new();
    for model in list.models() {
        let tokenizer = tokenizers.get(&model);
        for endpoint in list.workers_of(&model) {
            present.push(endpoint.worker_id.clone());
            let Some(tokenizer) = &tokenizer else { continue };
            let due = parity.probed_at(&endpoint.worker_id).is_none_or(|at| at.elapsed() >= interval);
            if due {
                let same = probe(tokenizer, up, &model, &endpoint).await;
                parity.record(&endpoint.worker_id, &model, endpoint.role, same, Instant::now());
            }
        }
    }
    parity.retain(&present);
}

/// Whether `endpoint` tokenizes every probe conversation as the proxy does (`None`: it could
/// not be asked, or the proxy cannot render them).
async fn probe(
    tokenizer: &Tokenizer,
    up: &Upstreams,
    model: &ModelName,
    endpoint: &Endpoint,
) -> Option<bool> {
    for (i, conversation) in CONVERSATIONS.iter().enumerate() {
        let messages: Value = serde_json::from_str(conversation).expect("a probe conversation is JSON");
        let body = json!({"model": model.as_str(), "messages": messages});
        let ours = match tokenizer.tokenize(Api::ChatCompletions, body.as_object()?, None) {
            Ok(Outcome::Tokens(t)) => t.ids,
            other => {
                tracing::debug!(?other, "render parity: the proxy cannot render the probe conversations");
                return None;
            }
        };
        let theirs = match worker_tokens(up, endpoint, &body).await {
            Ok(ids) => ids,
            Err(why) => {
                tracing::debug!(worker = %endpoint.worker_id, %why, "render parity: no answer to compare");
                return None;
            }
        };
        if let Some(d) = compare(&ours, &theirs) {
            tracing::warn!(
                worker = %endpoint.worker_id,
                model = model.as_str(),
                conversation = i,
                at = d.at,
                proxy_token = d.proxy,
                worker_token = d.worker,
                "render parity: the worker tokenizes chat prompts differently from this proxy's \
                 tokenizer and chat template for the model; its chat prompts route on load until they agree"
            );
            return Some(false);
        }
    }
    Some(true)
}

/// The ids `endpoint`'s `/v1/tokenize` gives for `body`.
async fn worker_tokens(up: &Upstreams, endpoint: &Endpoint, body: &Value) -> Result<Vec<u32>, String> {
    let req = Request::post(format!("{}/v1/tokenize", endpoint.url))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let v = worker_json(&up.client, req).await?;
    let ids = v.get("tokens").and_then(Value::as_array).ok_or("no tokens in the answer")?;
    ids.iter()
        .map(|x| {
            x.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| "a token id out of range".into())
        })
        .collect()
}

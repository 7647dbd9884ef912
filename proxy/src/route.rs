//! Route one request: both picks at once for a PD model (one round trip), one pick for an
//! aggregated model or a pooling API (embeddings, rerank, classify).

mod releases;

use std::sync::Arc;
use std::time::Instant;

use infera_proto::types::{ModelName, PickKind, ReleaseReason, Target};

use crate::control::{ControlLink, Pick, PickError};
use crate::error::{Leg, ProxyError};
use crate::facts::Facts;

/// Where one request goes: its picks (each released as `CANCELLED` if dropped), until
/// [`dispatch`](crate::forward::dispatch) sends them as one
/// [`RequestLegs`](crate::request_legs::RequestLegs).
#[derive(Debug)]
pub struct Route {
    /// The model it was routed for.
    pub model: ModelName,
    /// The prefill leg (PD models).
    pub prefill: Option<Pick>,
    /// The decode leg (or the only leg).
    pub decode: Pick,
}

/// The targets a request already failed on, per leg: its retries pass them by.
#[derive(Clone, Debug, Default)]
pub struct Exclude {
    /// Prefill targets.
    pub prefill: Vec<Target>,
    /// Decode targets.
    pub decode: Vec<Target>,
}

/// Picks the legs of a request, passing by the targets in `exclude`. A model not yet in the
/// target list is tried as PD; control refuses the prefill pick of an aggregated model with
/// `NO_POOL`.
///
/// A decode pick control's fleet admission queues waits in control's queue until `until` (the
/// request's queue deadline); a PD request picks its prefill only once its decode is admitted.
pub async fn route(
    link: &Arc<ControlLink>,
    facts: &Facts,
    exclude: &Exclude,
    until: Instant,
) -> Result<Route, ProxyError> {
    let list = link.targets();
    let model = match list.model_for(facts.model.as_ref()) {
        Some(m) => m,
        None => {
            return Err(ProxyError::BadRequest("model is required: the deployment serves several models"));
        }
    };
    if !facts.api.generates() {
        // One forward pass on one worker (`Api::generates`): on load, never through a PD pair.
        if list.is_pd(&model) == Some(true) {
            return Err(ProxyError::NotAggregated { model, path: facts.api.path() });
        }
        let decode = admitted(link, facts, &model, &exclude.decode, until).await;
        let decode = decode.map_err(|e| e.into_proxy_error(&model, Leg::Decode))?;
        return Ok(Route { model, prefill: None, decode });
    }
    if list.is_pd(&model) == Some(false) {
        let decode = admitted(link, facts, &model, &exclude.decode, until).await;
        let decode = decode.map_err(|e| e.into_proxy_error(&model, Leg::Decode))?;
        return Ok(Route { model, prefill: None, decode });
    }
    if list.is_pd(&model) == Some(true)
        && let Some(version) = releases::unable_in_pd(&list, &model, facts.api)
    {
        return Err(ProxyError::NotServedPd { model, path: facts.api.path(), version });
    }
    if list.is_pd(&model) == Some(true) && parallel_samples(facts) > 1 {
        return Err(ProxyError::BadRequest(
            "n > 1 is not served by a prefill/decode deployment: SGLang's decode never answers it \
             (send n requests instead)",
        ));
    }
    let (prefill, decode) = tokio::join!(
        link.pick(PickKind::Prefill, facts, &model, &exclude.prefill),
        link.pick(PickKind::Decode, facts, &model, &exclude.decode)
    );
    let (prefill, decode) = match (prefill, decode) {
        // Admission queued the decode: the prefill waits with it, unbooked.
        (prefill, Err(PickError::Queued)) => {
            if let Ok(p) = prefill {
                p.release(ReleaseReason::Cancelled);
            }
            let d = link.pick_waiting(facts, &model, &exclude.decode, until).await;
            let d = d.map_err(|e| e.into_proxy_error(&model, Leg::Decode))?;
            (link.pick(PickKind::Prefill, facts, &model, &exclude.prefill).await, Ok(d))
        }
        answers => answers,
    };
    match (prefill, decode) {
        (Ok(p), Ok(d)) => Ok(Route { model, prefill: Some(p), decode: d }),
        (Err(PickError::NoPool), Ok(d)) => Ok(Route { model, prefill: None, decode: d }),
        (Ok(p), Err(e)) => {
            p.release(ReleaseReason::Failed);
            Err(e.into_proxy_error(&model, Leg::Decode))
        }
        (Err(e), Ok(d)) => {
            d.release(ReleaseReason::Failed);
            Err(e.into_proxy_error(&model, Leg::Prefill))
        }
        (Err(e), Err(_)) => Err(e.into_proxy_error(&model, Leg::Prefill)),
    }
}

/// A decode pick, waiting in control's admission queue when admission queues it.
async fn admitted(
    link: &Arc<ControlLink>,
    facts: &Facts,
    model: &ModelName,
    exclude: &[Target],
    until: Instant,
) -> Result<Pick, PickError> {
    match link.pick(PickKind::Decode, facts, model, exclude).await {
        Err(PickError::Queued) => link.pick_waiting(facts, model, exclude, until).await,
        answer => answer,
    }
}

/// How many samples the request asks of each prompt: `n` (OpenAI APIs) or
/// `sampling_params.n` (SGLang's `/generate`). SGLang answers n > 1 by first sending a request
/// with `max_new_tokens = 0` to cache the prompt (`TokenizerManager._handle_batch_request`,
/// `sglang/srt/managers/tokenizer_manager.py`), on the bootstrap room of the first sample: through
/// a PD pair (0.5.23) the decode then waits for ever, whatever rooms the router gives.
fn parallel_samples(facts: &Facts) -> u64 {
    let n = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_u64).unwrap_or(1);
    n(facts.body.get("n")).max(n(facts.body.get("sampling_params").and_then(|s| s.get("n"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_from_n_and_from_sampling_params() {
        let facts = |body: serde_json::Value| {
            let body = body.to_string();
            crate::facts::derive(
                infera_proto::types::Api::Completions,
                &http::HeaderMap::new(),
                body.as_bytes(),
            )
            .unwrap()
        };
        let prompt = |extra: serde_json::Value| {
            let mut body = serde_json::json!({"model": "m", "prompt": "x"});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            facts(body)
        };
        assert_eq!(parallel_samples(&prompt(serde_json::json!({}))), 1);
        assert_eq!(parallel_samples(&prompt(serde_json::json!({"n": 3}))), 3);
        assert_eq!(parallel_samples(&prompt(serde_json::json!({"sampling_params": {"n": 2}}))), 2);
    }
}

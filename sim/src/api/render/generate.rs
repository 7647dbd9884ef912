//! `POST /generate`: `{"text", "output_ids", "meta_info"}`, cumulative text by default, in the
//! key order of SGLang 0.5.23's `meta_info` (python/sglang/srt/managers/tokenizer_manager.py):
//! logprob lists when asked for; on the last event `weight_versions` and `e2e_latency`;
//! `response_sent_to_client_ts` on the first event sent (the whole body, or a stream's first).

use serde_json::{Map, Value, json};

use super::{Finish, Render, Step, logprobs, unix_now};

/// `meta_info.finish_reason`.
fn finish_reason(r: &Render, s: &Step<'_>) -> Value {
    match s.finish {
        None => Value::Null,
        Some(Finish::Length) => {
            json!({ "type": "length", "length": if r.prefill_leg { 0 } else { s.tokens } })
        }
        Some(Finish::Stop(matched)) => json!({ "type": "stop", "matched": matched }),
        Some(Finish::Abort) => json!({
            "type": "abort", "message": "Abort request", "status_code": 200, "err_type": null,
        }),
    }
}

/// The event (or whole body) for a step.
pub(super) fn event(r: &Render, s: &Step<'_>) -> (Option<&'static str>, Value) {
    let mut meta = Map::new();
    meta.insert("id".into(), json!(r.rid));
    meta.insert("finish_reason".into(), finish_reason(r, s));
    meta.insert("prompt_tokens".into(), json!(r.prompt_tokens));
    meta.insert("weight_version".into(), json!("default"));
    meta.insert("num_retractions".into(), json!(0));
    if let Some(positions) = r.positions(s, true) {
        let (tokens, tops) = logprobs::generate(&positions);
        // Prompt logprobs only from `logprob_start_len`, which defaults to none; a PD decode
        // has none (its prefill computed the prompt).
        meta.insert("input_token_logprobs".into(), logprobs::prompt(r.seed, r.rid_hash, &r.prompt_logprobs));
        meta.insert("output_token_logprobs".into(), tokens);
        meta.insert("output_token_logprobs_length".into(), json!(positions.len()));
        meta.insert("input_top_logprobs".into(), json!([]));
        meta.insert("output_top_logprobs".into(), tops);
    }
    meta.insert("reasoning_tokens".into(), json!(0));
    meta.insert("completion_tokens".into(), json!(s.tokens));
    meta.insert("cached_tokens".into(), json!(s.cached));
    if s.finish.is_some() {
        let spans = json!([{ "version": "default", "start": 0, "end": s.tokens }]);
        meta.insert("weight_versions".into(), spans);
    }
    // `get_cached_tokens_details`: none without a cache hit.
    let details = if s.cached > 0 { json!({ "device": s.cached, "host": 0 }) } else { Value::Null };
    meta.insert("cached_tokens_details".into(), details);
    // The scheduler reports a rank only when there are several (`dp_ranks`).
    meta.insert("dp_rank".into(), if r.options.ranks > 1 { json!(r.rank) } else { Value::Null });
    if s.finish.is_some() {
        meta.insert("e2e_latency".into(), json!(r.e2e_latency()));
    }
    if r.first {
        meta.insert("response_sent_to_client_ts".into(), json!(unix_now()));
    }
    (None, json!({ "text": s.text, "output_ids": s.ids, "meta_info": meta }))
}

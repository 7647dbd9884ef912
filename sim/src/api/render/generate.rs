//! `POST /generate`: `{"text", "output_ids", "meta_info"}`, cumulative text by default; the last
//! event carries `finish_reason`, `e2e_latency` and `response_sent_to_client_ts`.

use serde_json::{Value, json};

use super::{Finish, Render, Step, unix_now};

/// The event (or whole body) for a step.
pub(super) fn event(r: &Render, s: &Step<'_>) -> (Option<&'static str>, Value) {
    let finish_reason = match s.finish {
        None => Value::Null,
        Some(Finish::Length) => {
            json!({ "type": "length", "length": if r.prefill_leg { 0 } else { s.tokens } })
        }
        Some(Finish::Abort) => json!({
            "type": "abort", "message": "Abort request", "status_code": 200, "err_type": null,
        }),
    };
    let mut meta = json!({
        "id": r.rid,
        "finish_reason": finish_reason,
        "prompt_tokens": r.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": s.tokens,
        "cached_tokens": s.cached,
        "dp_rank": r.rank,
    });
    if s.finish.is_some() {
        meta["e2e_latency"] = json!(r.e2e_latency());
        meta["response_sent_to_client_ts"] = json!(unix_now());
    }
    (None, json!({ "text": s.text, "output_ids": s.ids, "meta_info": meta }))
}

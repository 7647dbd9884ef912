//! `POST /v1/responses` (minimal): a `response` object with one `output_text` message; when
//! streaming, `response.created`, `response.output_text.delta` … `response.completed` events
//! (named with `event:` lines), then `[DONE]` like the other routes.

use serde_json::{Value, json};

use super::{Finish, Render, Step};

fn response(r: &Render, s: &Step<'_>, text: &str) -> Value {
    let status = match s.finish {
        None => "in_progress",
        Some(Finish::Length) => "completed",
        Some(Finish::Abort) => "incomplete",
    };
    let output = if s.finish.is_some() {
        json!([{
            "type": "message",
            "id": format!("msg_{}", r.rid),
            "status": status,
            "role": "assistant",
            "content": [{ "type": "output_text", "text": text, "annotations": [] }],
        }])
    } else {
        json!([])
    };
    json!({
        "id": format!("resp_{}", r.rid),
        "object": "response",
        "created_at": r.created,
        "model": r.model,
        "status": status,
        "output": output,
        "usage": {
            "input_tokens": r.prompt_tokens,
            "output_tokens": s.tokens,
            "total_tokens": r.prompt_tokens + s.tokens,
            "input_tokens_details": { "cached_tokens": s.cached },
        },
    })
}

/// The events for a step.
pub(super) fn events(r: &Render, s: &Step<'_>) -> Vec<(Option<&'static str>, Value)> {
    let mut out = Vec::new();
    if r.first {
        let created = json!({ "type": "response.created", "response": response(r, s, "") });
        out.push((Some("response.created"), created));
    }
    if !s.delta.is_empty() {
        let delta = json!({
            "type": "response.output_text.delta", "item_id": format!("msg_{}", r.rid),
            "output_index": 0, "content_index": 0, "delta": s.delta,
        });
        out.push((Some("response.output_text.delta"), delta));
    }
    if s.finish.is_some() {
        let done = json!({ "type": "response.completed", "response": response(r, s, s.text) });
        out.push((Some("response.completed"), done));
    }
    out
}

/// The non-stream body.
pub(super) fn body(r: &Render, s: &Step<'_>) -> Value {
    response(r, s, s.text)
}

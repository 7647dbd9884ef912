//! `POST /v1/chat/completions`: role chunk → content chunks → finish chunk → optional usage
//! chunk (`choices: []`) → `[DONE]`; or one `chat.completion` body.

use serde_json::{Value, json};

use super::{Finish, Render, Step};

fn reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Length => "length",
        Finish::Abort => "abort",
    }
}

fn chunk(r: &Render, delta: Value, finish: Option<Finish>) -> (Option<&'static str>, Value) {
    let event = json!({
        "id": r.rid,
        "object": "chat.completion.chunk",
        "created": r.created,
        "model": r.model,
        "choices": [{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": finish.map(reason),
            "matched_stop": null,
        }],
    });
    (None, event)
}

/// The chunks for a step.
pub(super) fn chunks(r: &Render, s: &Step<'_>) -> Vec<(Option<&'static str>, Value)> {
    let mut out = Vec::new();
    if r.first {
        out.push(chunk(r, json!({ "reasoning_content": null, "role": "assistant", "content": "" }), None));
    }
    if !s.delta.is_empty() {
        out.push(chunk(r, json!({ "reasoning_content": null, "content": s.delta }), None));
    }
    if let Some(finish) = s.finish {
        out.push(chunk(r, json!({ "reasoning_content": null }), Some(finish)));
        if r.include_usage {
            let usage = json!({
                "id": r.rid, "object": "chat.completion.chunk", "created": r.created, "model": r.model,
                "choices": [], "usage": r.usage(s.tokens, s.cached),
            });
            out.push((None, usage));
        }
    }
    out
}

/// The non-stream body.
pub(super) fn body(r: &Render, s: &Step<'_>) -> Value {
    json!({
        "id": r.rid,
        "object": "chat.completion",
        "created": r.created,
        "model": r.model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": s.text, "reasoning_content": null },
            "logprobs": null,
            "finish_reason": s.finish.map(reason),
            "matched_stop": null,
        }],
        "usage": r.usage(s.tokens, s.cached),
        "metadata": null,
    })
}

//! `POST /v1/chat/completions`: role chunk → content chunks → finish chunk → optional usage
//! chunk (`choices: []`) → `[DONE]`; or one `chat.completion` body with `metadata`.

use serde_json::{Value, json};

use super::{Finish, Render, Step, logprobs};

fn reason(finish: &Finish) -> &'static str {
    match finish {
        Finish::Length => "length",
        Finish::Abort => "abort",
        Finish::Stop(_) => "stop",
    }
}

fn matched(finish: Option<&Finish>) -> Value {
    match finish {
        Some(Finish::Stop(s)) => json!(s),
        _ => Value::Null,
    }
}

fn chunk(
    r: &Render,
    delta: Value,
    logprobs: Value,
    finish: Option<&Finish>,
) -> (Option<&'static str>, Value) {
    let event = json!({
        "id": r.rid,
        "object": "chat.completion.chunk",
        "created": r.created,
        "model": r.model,
        "choices": [{
            "index": r.options.index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish.map(reason),
            "matched_stop": matched(finish),
        }],
    });
    (None, event)
}

/// The chunks for a step.
pub(super) fn chunks(r: &Render, s: &Step<'_>) -> Vec<(Option<&'static str>, Value)> {
    let mut out = Vec::new();
    if r.first {
        let role = json!({ "reasoning_content": null, "role": "assistant", "content": "" });
        out.push(chunk(r, role, Value::Null, None));
    }
    if !s.delta.is_empty() {
        let logprobs = r.positions(s, false).map_or(Value::Null, |p| logprobs::chat(&p));
        out.push(chunk(r, json!({ "reasoning_content": null, "content": s.delta }), logprobs, None));
    }
    if let Some(finish) = s.finish {
        out.push(chunk(r, json!({ "reasoning_content": null }), Value::Null, Some(finish)));
        if r.options.include_usage {
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
    let logprobs = r.positions(s, true).map_or(Value::Null, |p| logprobs::chat(&p));
    json!({
        "id": r.rid,
        "object": "chat.completion",
        "created": r.created,
        "model": r.model,
        "choices": [{
            "index": r.options.index,
            "message": { "role": "assistant", "content": s.text, "reasoning_content": null },
            "logprobs": logprobs,
            "finish_reason": s.finish.map(reason),
            "matched_stop": matched(s.finish),
        }],
        "usage": r.usage(s.tokens, s.cached),
        "metadata": Render::metadata(s.tokens),
    })
}

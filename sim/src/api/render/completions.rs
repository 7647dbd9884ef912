//! `POST /v1/completions`: `text_completion` chunks (`"usage": null`), a finish chunk, an optional
//! usage chunk (`choices: []`), `[DONE]`; or one `text_completion` body.

use serde_json::{Value, json};

use super::{Finish, Render, Step};

fn reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Length => "length",
        Finish::Abort => "abort",
    }
}

fn choice(text: &str, finish: Option<Finish>) -> Value {
    json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish.map(reason), "matched_stop": null })
}

/// The chunks for a step.
pub(super) fn chunks(r: &Render, s: &Step<'_>) -> Vec<(Option<&'static str>, Value)> {
    let event = |choices: Value, usage: Value| {
        let chunk = json!({
            "id": r.rid, "object": "text_completion", "created": r.created, "model": r.model,
            "choices": choices, "usage": usage,
        });
        (None, chunk)
    };
    let mut out = Vec::new();
    if !s.delta.is_empty() && s.finish.is_none() {
        out.push(event(json!([choice(s.delta, None)]), Value::Null));
    }
    if let Some(finish) = s.finish {
        out.push(event(json!([choice(s.delta, Some(finish))]), Value::Null));
        if r.include_usage {
            out.push(event(json!([]), r.usage(s.tokens, s.cached)));
        }
    }
    out
}

/// The non-stream body.
pub(super) fn body(r: &Render, s: &Step<'_>) -> Value {
    json!({
        "id": r.rid,
        "object": "text_completion",
        "created": r.created,
        "model": r.model,
        "choices": [choice(s.text, s.finish)],
        "usage": r.usage(s.tokens, s.cached),
    })
}

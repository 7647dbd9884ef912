//! `POST /v1/completions`: `text_completion` chunks (`"usage": null`), a finish chunk, an optional
//! usage chunk (`choices: []`, no null details), `[DONE]`; or one `text_completion` body with
//! `metadata`.

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

fn choice(r: &Render, text: &str, logprobs: Value, finish: Option<&Finish>) -> Value {
    json!({
        "index": r.options.index, "text": text, "logprobs": logprobs, "finish_reason": finish.map(reason),
        "matched_stop": matched(finish),
    })
}

/// The step's logprobs object (its own tokens in a stream, all in a whole body), or null.
fn step_logprobs(r: &Render, s: &Step<'_>, all: bool) -> Value {
    r.positions(s, all).map_or(Value::Null, |p| logprobs::completions(&p))
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
        out.push(event(json!([choice(r, s.delta, step_logprobs(r, s, false), None)]), Value::Null));
    }
    if let Some(finish) = s.finish {
        out.push(event(json!([choice(r, s.delta, step_logprobs(r, s, false), Some(finish))]), Value::Null));
        if r.options.include_usage {
            // The streamed usage leaves out the details it does not have.
            let mut usage = r.usage(s.tokens, s.cached);
            if let Value::Object(u) = &mut usage {
                u.retain(|_, v| !v.is_null());
            }
            out.push(event(json!([]), usage));
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
        "choices": [choice(r, s.text, step_logprobs(r, s, true), s.finish)],
        "usage": r.usage(s.tokens, s.cached),
        "metadata": Render::metadata(s.tokens),
    })
}

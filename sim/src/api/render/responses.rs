//! `POST /v1/responses`: a `response` object with one `output_text` message, in SGLang 0.5.23's
//! shape (python/sglang/srt/entrypoints/openai/serving_responses.py and protocol.py,
//! `ResponsesResponse`): the request's settings echoed, `incomplete` with `max_output_tokens`
//! when the output ran to its limit. Streamed as SGLang streams it: `response.created`,
//! `response.in_progress`, `response.output_item.added`, `response.content_part.added`,
//! `response.output_text.delta`…, `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`, then `response.completed` or `response.incomplete` — each with
//! an `event:` line and a `sequence_number`, and no `[DONE]` after them.

use serde_json::{Value, json};

use super::{Finish, Render, Step};

/// The item's id.
fn item_id(r: &Render) -> String {
    format!("msg_{}", r.rid)
}

/// The `output_text` part.
fn part(text: &str) -> Value {
    json!({ "annotations": [], "text": text, "type": "output_text", "logprobs": null })
}

/// The message item.
fn item(r: &Render, text: Option<&str>) -> Value {
    let (content, status) = match text {
        Some(t) => (json!([part(t)]), "completed"),
        None => (json!([]), "in_progress"),
    };
    json!({ "id": item_id(r), "content": content, "role": "assistant", "status": status, "type": "message",
            "phase": "final_answer" })
}

/// The response object; `text` once it is done.
fn response(r: &Render, s: &Step<'_>, text: Option<&str>) -> Value {
    let body = &r.options.body;
    let echo = |k: &str| body.get(k).cloned().unwrap_or(Value::Null);
    // Ran to the limit the request set; without one, the sim's default length reads as done.
    let limited = body.get("max_output_tokens").is_some_and(|v| !v.is_null());
    let (status, incomplete) = match (s.finish, text) {
        (Some(Finish::Length), Some(_)) if limited => {
            ("incomplete", json!({ "reason": "max_output_tokens" }))
        }
        (Some(Finish::Abort), Some(_)) => ("cancelled", Value::Null),
        (Some(_), Some(_)) => ("completed", Value::Null),
        _ => ("in_progress", Value::Null),
    };
    let done = text.is_some();
    let usage = done.then(|| {
        json!({
            "input_tokens": r.prompt_tokens,
            "input_tokens_details": { "cached_tokens": s.cached, "cache_write_tokens": 0 },
            "output_tokens": s.tokens,
            "output_tokens_details": { "reasoning_tokens": 0 },
            "total_tokens": r.prompt_tokens + s.tokens,
        })
    });
    json!({
        "id": format!("resp_{}", r.rid),
        "object": "response",
        "created_at": r.created,
        "model": r.model,
        "output": if done { json!([item(r, text)]) } else { json!([]) },
        "status": status,
        "usage": usage,
        "parallel_tool_calls": body.get("parallel_tool_calls").cloned().unwrap_or(json!(true)),
        "tool_choice": body.get("tool_choice").cloned().unwrap_or(json!("auto")),
        "tools": body.get("tools").cloned().unwrap_or(json!([])),
        "error": null,
        "incomplete_details": incomplete,
        "instructions": echo("instructions"),
        "max_output_tokens": echo("max_output_tokens"),
        "previous_response_id": echo("previous_response_id"),
        "reasoning": { "effort": null, "summary": null },
        "store": body.get("store").cloned().unwrap_or(json!(true)),
        "temperature": body.get("temperature").and_then(Value::as_f64).map_or(Value::Null, |t| json!(t)),
        "text": if done { json!({ "format": { "type": "text" } }) } else { Value::Null },
        "top_p": body.get("top_p").and_then(Value::as_f64).map_or(Value::Null, |t| json!(t)),
        "truncation": "disabled",
        "user": echo("user"),
        "metadata": body.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// The events for a step (`sequence_number`s are filled in by [`Render`]).
pub(super) fn events(r: &Render, s: &Step<'_>) -> Vec<(Option<&'static str>, Value)> {
    let mut out = Vec::new();
    let named = |name: &'static str, data: Value| (Some(name), data);
    if r.first {
        let created =
            json!({ "type": "response.created", "response": response(r, s, None), "sequence_number": 0 });
        out.push(named("response.created", created));
        let progress =
            json!({ "type": "response.in_progress", "response": response(r, s, None), "sequence_number": 0 });
        out.push(named("response.in_progress", progress));
        let added = json!({ "item": item(r, None), "output_index": 0, "sequence_number": 0,
                            "type": "response.output_item.added" });
        out.push(named("response.output_item.added", added));
        let part_added = json!({ "content_index": 0, "item_id": item_id(r), "output_index": 0, "part": part(""),
                                 "sequence_number": 0, "type": "response.content_part.added" });
        out.push(named("response.content_part.added", part_added));
    }
    if !s.delta.is_empty() {
        let delta = json!({
            "content_index": 0, "delta": s.delta, "item_id": item_id(r), "logprobs": [], "output_index": 0,
            "sequence_number": 0, "type": "response.output_text.delta",
        });
        out.push(named("response.output_text.delta", delta));
    }
    if s.finish.is_some() {
        let text_done = json!({ "content_index": 0, "item_id": item_id(r), "logprobs": [], "output_index": 0,
                                "sequence_number": 0, "text": s.text, "type": "response.output_text.done" });
        out.push(named("response.output_text.done", text_done));
        let part_done = json!({ "content_index": 0, "item_id": item_id(r), "output_index": 0, "part": part(s.text),
                                "sequence_number": 0, "type": "response.content_part.done" });
        out.push(named("response.content_part.done", part_done));
        let item_done = json!({ "item": item(r, Some(s.text)), "output_index": 0, "sequence_number": 0,
                                "type": "response.output_item.done" });
        out.push(named("response.output_item.done", item_done));
        let full = response(r, s, Some(s.text));
        let name = if full["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        out.push(named(name, json!({ "type": name, "response": full, "sequence_number": 0 })));
    }
    out
}

/// The non-stream body.
pub(super) fn body(r: &Render, s: &Step<'_>) -> Value {
    response(r, s, Some(s.text))
}

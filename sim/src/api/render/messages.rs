//! `POST /v1/messages` (Anthropic's), as SGLang 0.5.23 converts its chat answer
//! (`AnthropicServing._convert_response` and `_generate_anthropic_stream` in
//! python/sglang/srt/entrypoints/anthropic/serving.py; the models in anthropic/protocol.py, dumped
//! without their `None` fields): one `message` body; or the events `message_start` (the input
//! tokens, `output_tokens` 0) → `content_block_start` (an empty text block, with the first text)
//! → `content_block_delta` (`text_delta`) per step → `content_block_stop` → `message_delta`
//! (`stop_reason`, the output tokens) → `message_stop`, each as `event: <type>` and its data, and
//! no `[DONE]`.

use serde_json::{Value, json};

use super::{Finish, Render, Step};

/// `STOP_REASON_MAP`: `stop` → `end_turn`, `length` → `max_tokens`; an unmapped reason (an
/// abort) → `end_turn`.
fn stop_reason(finish: &Finish) -> &'static str {
    match finish {
        Finish::Length => "max_tokens",
        Finish::Stop(_) | Finish::Abort => "end_turn",
    }
}

/// The message id: `msg_` and 32 hex digits (SGLang's is a fresh uuid4; the sim's follows from
/// the request's id).
fn id(r: &Render) -> String {
    format!("msg_{:016x}{:016x}", r.rid_hash, r.rid_hash.rotate_left(17) ^ r.seed)
}

/// `_anthropic_usage_from_openai`: the input tokens without the cached ones, which are reported
/// apart (`cache_read_input_tokens`) when the engine reports them (`--enable-cache-report`).
fn usage(r: &Render, output: u32, cached: u32) -> Value {
    let cached = if r.options.cache_report { cached } else { 0 };
    let mut usage = json!({ "input_tokens": r.prompt_tokens.saturating_sub(cached) });
    if cached > 0 {
        usage["cache_read_input_tokens"] = json!(cached);
    }
    usage["output_tokens"] = json!(output);
    usage
}

/// The events of a step.
pub(super) fn events(r: &Render, s: &Step<'_>) -> Vec<(Option<&'static str>, Value)> {
    let mut out = Vec::new();
    let mut event = |name: &'static str, data: Value| out.push((Some(name), data));
    if r.first {
        let message = json!({
            "id": id(r), "type": "message", "role": "assistant", "content": [], "model": r.model,
            "usage": usage(r, 0, s.cached),
        });
        event("message_start", json!({ "type": "message_start", "message": message }));
    }
    if !s.delta.is_empty() {
        // The block opens with the first text.
        if s.text.len() == s.delta.len() {
            let block = json!({ "type": "text", "text": "" });
            event(
                "content_block_start",
                json!({ "type": "content_block_start", "index": 0, "content_block": block }),
            );
        }
        let delta = json!({ "type": "text_delta", "text": s.delta });
        event("content_block_delta", json!({ "type": "content_block_delta", "index": 0, "delta": delta }));
    }
    if let Some(finish) = s.finish {
        if !s.text.is_empty() {
            event("content_block_stop", json!({ "type": "content_block_stop", "index": 0 }));
        }
        event(
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": { "stop_reason": stop_reason(finish) },
                "usage": { "output_tokens": s.tokens },
            }),
        );
        event("message_stop", json!({ "type": "message_stop" }));
    }
    out
}

/// The events that end a stream that failed (`_flush_on_error`): the `error` event, then
/// `message_stop`.
pub(super) fn failed(error: Value) -> Vec<(Option<&'static str>, Value)> {
    vec![(Some("error"), error), (Some("message_stop"), json!({ "type": "message_stop" }))]
}

/// The non-stream body: one text block (empty when no text), even without text.
pub(super) fn body(r: &Render, s: &Step<'_>) -> Value {
    json!({
        "id": id(r),
        "type": "message",
        "role": "assistant",
        "content": [{ "type": "text", "text": s.text }],
        "model": r.model,
        "stop_reason": s.finish.map_or("end_turn", stop_reason),
        "usage": usage(r, s.tokens, s.cached),
    })
}

//! `/v1/responses` → chat messages, following SGLang 0.5.23's
//! `OpenAIServingResponses._construct_input_messages` and `_make_request`: `instructions` as a
//! leading system message, a string `input` as one user message, input items converted one by
//! one (`developer` → a labelled `system`, `function_call` → an assistant tool call,
//! `function_call_output` → a tool message, `reasoning` → assistant `reasoning_content`,
//! `input_text`/`output_text` parts → text parts), consecutive assistant messages merged, and
//! `function` tools in the chat shape.
//!
//! SGLang then coalesces every system message into one leading system message unless the
//! template renders a mid-conversation system message inline (0.5.23 probes the template for
//! that; 0.5.18 always coalesces). [`ChatInput::coalesces_system`] marks such requests, and the
//! tokenizer compares both renderings (see [`crate::Ambiguity`]).

use serde_json::{Map, Value, json};

use crate::error::TokenizeError;
use crate::prompt::{ChatInput, Prompt, Skip};

/// How SGLang labels a developer message it turns into a system message.
const DEVELOPER_LABEL: &str = "Developer instructions:";

/// Converts a `/v1/responses` body.
pub(crate) fn to_chat(body: &Map<String, Value>) -> Result<Prompt, TokenizeError> {
    if body.get("previous_response_id").is_some_and(|v| !v.is_null()) {
        return Ok(Prompt::Skip(Skip::StoredHistory));
    }
    let mut messages = Vec::new();
    if let Some(instructions) = body.get("instructions").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    match body.get("input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for item in items {
                match item_to_message(item)? {
                    Item::Message(m) => messages.push(m),
                    Item::Dropped => {}
                    Item::Skip(skip) => return Ok(Prompt::Skip(skip)),
                }
            }
        }
        _ => return Err(TokenizeError::Request("input must be a string or a list of items".into())),
    }
    let messages = merge_consecutive_assistants(messages);
    let mut tools = Vec::new();
    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {
                let mut function = Map::new();
                function.insert("name".into(), tool.get("name").cloned().unwrap_or(Value::Null));
                function
                    .insert("description".into(), tool.get("description").cloned().unwrap_or(Value::Null));
                function.insert("parameters".into(), tool.get("parameters").cloned().unwrap_or(Value::Null));
                if let Some(strict) = tool.get("strict").filter(|v| !v.is_null()) {
                    function.insert("strict".into(), strict.clone());
                }
                tools.push(json!({"type": "function", "function": function}));
            }
            // A custom tool is offered through a shim SGLang writes itself.
            Some("custom") => return Ok(Prompt::Skip(Skip::Unsupported)),
            // Built-in tools go through harmony, not the chat template.
            _ => {}
        }
    }
    let tool_choice = if tools.is_empty() {
        Value::from("none")
    } else {
        match body.get("tool_choice") {
            None | Some(Value::Null) => Value::from("auto"),
            Some(Value::Object(c)) => json!({"type": "function", "function": {"name": c.get("name")}}),
            Some(c) => c.clone(),
        }
    };
    let template_kwargs = match body.get("chat_template_kwargs") {
        Some(Value::Object(o)) => o.clone(),
        _ => Map::new(),
    };
    Ok(Prompt::Chat(Box::new(ChatInput {
        messages,
        tools,
        tool_choice,
        reasoning_effort: body
            .get("reasoning")
            .and_then(|r| r.get("effort"))
            .filter(|v| !v.is_null())
            .cloned(),
        template_kwargs,
        continue_final_message: false,
        coalesces_system: true,
    })))
}

enum Item {
    Message(Value),
    Dropped,
    Skip(Skip),
}

/// `_normalize_response_message_for_chat`.
fn item_to_message(item: &Value) -> Result<Item, TokenizeError> {
    let Some(o) = item.as_object() else {
        return Err(TokenizeError::Request("input items must be objects".into()));
    };
    let mut o = o.clone();
    if o.get("role").and_then(Value::as_str) == Some("developer") {
        o.insert("role".into(), "system".into());
        let labelled = label_developer_content(o.get("content").cloned().unwrap_or(Value::Null));
        o.insert("content".into(), labelled);
    }
    let field = |name: &str| o.get(name).cloned().unwrap_or(Value::Null);
    let message = match o.get("type").and_then(Value::as_str) {
        Some("function_call") => {
            let arguments = match o.get("arguments") {
                Some(Value::String(raw)) => match serde_json::from_str::<Value>(raw) {
                    Ok(Value::Object(_)) => raw.clone(),
                    _ => "{}".to_owned(),
                },
                Some(args @ Value::Object(_)) => args.to_string(),
                _ => "{}".to_owned(),
            };
            let id = o
                .get("call_id")
                .filter(|v| truthy(v))
                .or_else(|| o.get("id"))
                .cloned()
                .unwrap_or(Value::Null);
            json!({"role": "assistant", "tool_calls": [
                {"id": id, "type": "function", "function": {"name": field("name"), "arguments": arguments}}
            ]})
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            let output = match field("output") {
                Value::Array(parts) => Value::from(
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<String>(),
                ),
                Value::Null if !o.contains_key("output") => Value::from(""),
                other => other,
            };
            json!({"role": "tool", "tool_call_id": field("call_id"), "content": output})
        }
        Some("custom_tool_call") => return Ok(Item::Skip(Skip::Unsupported)),
        Some("reasoning") => {
            let texts = |v: Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| {
                        e.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_owned)
                    })
                    .collect()
            };
            let mut parts = texts(field("summary"));
            if parts.is_empty() {
                parts = texts(field("content"));
            }
            if parts.is_empty() {
                // An empty item, or only an encrypted state SGLang decodes and the proxy cannot.
                return Ok(if o.get("encrypted_content").is_some_and(truthy) {
                    Item::Skip(Skip::Unsupported)
                } else {
                    Item::Dropped
                });
            }
            json!({"role": "assistant", "reasoning_content": parts.join("\n")})
        }
        None | Some("message") => {
            let mut m = Map::new();
            for (k, v) in &o {
                if v.is_null() || matches!(k.as_str(), "id" | "status" | "type") {
                    continue;
                }
                let v = match (k.as_str(), v) {
                    ("content", Value::Array(parts)) => {
                        Value::Array(parts.iter().map(content_part).collect())
                    }
                    _ => v.clone(),
                };
                m.insert(k.clone(), v);
            }
            Value::Object(m)
        }
        Some(other) => return Err(TokenizeError::Request(format!("unsupported input item type {other:?}"))),
    };
    Ok(Item::Message(message))
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
    }
}

/// `input_text` / `output_text` → `{"type": "text", "text": …}`; media parts keep a media type
/// (the chat path then skips the request).
fn content_part(part: &Value) -> Value {
    match part.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text") => {
            json!({"type": "text", "text": part.get("text").cloned().unwrap_or_else(|| "".into())})
        }
        Some("input_image") => json!({"type": "image_url"}),
        _ => part.clone(),
    }
}

fn label_developer_content(content: Value) -> Value {
    match content {
        Value::String(s) => format!("{DEVELOPER_LABEL}\n{s}").into(),
        Value::Array(mut parts) => {
            if let Some(part) = parts.iter_mut().find(|p| p.get("text").is_some_and(Value::is_string)) {
                let text = part["text"].as_str().unwrap_or_default();
                part["text"] = format!("{DEVELOPER_LABEL}\n{text}").into();
            } else {
                parts.insert(0, json!({"type": "input_text", "text": DEVELOPER_LABEL}));
            }
            Value::Array(parts)
        }
        other => other,
    }
}

/// `_merge_consecutive_assistant_messages` (0.5.23: only within one `phase`, or into a message
/// that holds nothing but reasoning).
fn merge_consecutive_assistants(messages: Vec<Value>) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(messages.len());
    for msg in messages {
        let is_assistant = |m: &Value| m.get("role").and_then(Value::as_str) == Some("assistant");
        let mergeable = merged.last().is_some_and(|prev| {
            let only_reasoning = prev.as_object().is_some_and(|o| {
                o.len() == 2 && o.contains_key("role") && o.contains_key("reasoning_content")
            });
            is_assistant(&msg)
                && is_assistant(prev)
                && (prev.get("phase") == msg.get("phase") || only_reasoning)
        });
        let (Some(Value::Object(prev)), true) = (merged.last_mut(), mergeable) else {
            merged.push(msg);
            continue;
        };
        if let Some(phase) = msg.get("phase").filter(|p| !p.is_null()) {
            prev.insert("phase".into(), phase.clone());
        }
        match msg.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(new) => {
                let combined = match prev.get("content") {
                    None | Some(Value::Null) => new.clone(),
                    Some(Value::String(p)) if p.is_empty() => new.clone(),
                    Some(Value::String(p)) if new.is_string() => {
                        format!("{p}\n\n{}", new.as_str().unwrap_or_default()).into()
                    }
                    Some(p) => Value::Array([as_parts(p), as_parts(new)].concat()),
                };
                prev.insert("content".into(), combined);
            }
        }
        if let Some(Value::Array(calls)) = msg.get("tool_calls").filter(|c| truthy(c)) {
            let mut all = prev.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
            all.extend(calls.iter().cloned());
            prev.insert("tool_calls".into(), all.into());
        }
        if let Some(new) = msg.get("reasoning_content").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            let joined = match prev.get("reasoning_content").and_then(Value::as_str).filter(|s| !s.is_empty())
            {
                Some(p) => format!("{p}\n{new}"),
                None => new.to_owned(),
            };
            prev.insert("reasoning_content".into(), joined.into());
        }
    }
    merged
}

fn as_parts(content: &Value) -> Vec<Value> {
    match content {
        Value::Array(parts) => parts.clone(),
        Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

/// SGLang's coalescing for templates without inline system support: every system message's
/// text, joined with a blank line, in one leading system message; the others in order.
pub(crate) fn coalesce_system(messages: &[Value]) -> Vec<Value> {
    let mut chunks: Vec<String> = Vec::new();
    let mut others = Vec::with_capacity(messages.len());
    for m in messages {
        if m.get("role").and_then(Value::as_str) != Some("system") {
            others.push(m.clone());
            continue;
        }
        match m.get("content") {
            Some(Value::String(s)) => chunks.push(s.clone()),
            Some(Value::Array(parts)) => {
                chunks.extend(
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(str::to_owned),
                );
            }
            _ => {}
        }
    }
    if chunks.is_empty() {
        return others;
    }
    let mut out = vec![json!({"role": "system", "content": chunks.join("\n\n")})];
    out.extend(others);
    out
}

#[cfg(test)]
mod tests;

//! Anthropic's `/v1/messages` (and `/v1/messages/count_tokens`) → chat messages, following SGLang
//! 0.5.23's `AnthropicServing._convert_to_chat_completion_request`
//! (python/sglang/srt/entrypoints/anthropic/serving.py): `system` (a string, or its text blocks
//! joined with newlines) as one leading system message; a string `content` as it is; content
//! blocks as text parts, `tool_use` blocks as the assistant's tool calls, `tool_result` blocks of a
//! user turn as tool messages (the text before them flushed as a user message first; in an
//! assistant turn, a `Tool result: …` text part); a single text part as a string; custom tools
//! as chat `function` tools (server tools dropped), `tool_choice` mapped (`any` → `required`).
//!
//! Skipped (routed on load): images (the engine expands them), `thinking` history and the
//! `thinking` switch (SGLang's rendering of them depends on the model's reasoning parser), inline
//! `system` messages (merged into the leading one or not, depending on the template), tool
//! references and search results.

use serde_json::{Map, Value, json};

use crate::error::TokenizeError;
use crate::prompt::{ChatInput, Prompt, Skip};

/// Converts a `/v1/messages` body.
pub(crate) fn to_chat(body: &Map<String, Value>) -> Result<Prompt, TokenizeError> {
    if body.get("thinking").is_some_and(|t| !t.is_null()) {
        return Ok(Prompt::Skip(Skip::Unsupported));
    }
    let Some(Value::Array(turns)) = body.get("messages") else {
        return Err(TokenizeError::Request("messages must be an array".into()));
    };
    let mut messages = Vec::new();
    if let Some(text) = system(body.get("system"))? {
        messages.push(json!({"role": "system", "content": text}));
    }
    for turn in turns {
        if let Err(skip) = convert_turn(turn, &mut messages)? {
            return Ok(Prompt::Skip(skip));
        }
    }
    let tools = tools(body.get("tools"))?;
    let tool_choice = match body.get("tool_choice").and_then(|c| c.get("type")).and_then(Value::as_str) {
        Some("none") => Value::from("none"),
        Some("auto") if !tools.is_empty() => Value::from("auto"),
        Some("any") if !tools.is_empty() => Value::from("required"),
        Some("tool") if !tools.is_empty() => {
            json!({"type": "function", "function": {"name": body["tool_choice"].get("name")}})
        }
        None if !tools.is_empty() => Value::from("auto"),
        _ => Value::Null,
    };
    let effort = body.get("output_config").and_then(|c| c.get("effort")).filter(|e| !e.is_null());
    Ok(Prompt::Chat(Box::new(ChatInput {
        messages,
        tools,
        tool_choice,
        // `xhigh` is the Anthropic-only level SGLang maps to `max`.
        reasoning_effort: effort.map(|e| if e == "xhigh" { Value::from("max") } else { e.clone() }),
        template_kwargs: Map::new(),
        continue_final_message: false,
        coalesces_system: false,
    })))
}

/// The leading system message's text: a non-blank string as it is, or the text blocks' texts
/// joined with newlines.
fn system(v: Option<&Value>) -> Result<Option<String>, TokenizeError> {
    let parts: Vec<&str> = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => [s.as_str()].into_iter().filter(|s| !s.trim().is_empty()).collect(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .filter(|t| !t.is_empty())
            .collect(),
        Some(_) => return Err(TokenizeError::Request("system must be a string or a list of blocks".into())),
    };
    Ok((!parts.is_empty()).then(|| parts.join("\n")))
}

/// Appends the chat messages of one Anthropic turn, or says why the prompt is not tokenized.
fn convert_turn(turn: &Value, out: &mut Vec<Value>) -> Result<Result<(), Skip>, TokenizeError> {
    let role = match turn.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        Some("system") => return Ok(Err(Skip::Unsupported)),
        _ => return Err(TokenizeError::Request("a message's role must be user or assistant".into())),
    };
    let blocks = match turn.get("content") {
        Some(Value::String(text)) => {
            out.push(json!({"role": role, "content": text}));
            return Ok(Ok(()));
        }
        Some(Value::Array(blocks)) => blocks,
        _ => return Err(TokenizeError::Request("a message's content must be a string or blocks".into())),
    };
    let mut parts: Vec<Value> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for block in blocks {
        let field = |name: &str| block.get(name).cloned().unwrap_or(Value::Null);
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text") {
                Some(Value::String(t)) => parts.push(json!({"type": "text", "text": t})),
                _ => return Err(TokenizeError::Request("a text block needs its text".into())),
            },
            Some("image") => return Ok(Err(Skip::Media)),
            Some("thinking" | "redacted_thinking" | "search_result") => return Ok(Err(Skip::Unsupported)),
            Some("tool_use") => {
                let input = block.get("input").filter(|i| !i.is_null()).cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": field("id"),
                    "type": "function",
                    "function": {"name": field("name"), "arguments": input.to_string()},
                }));
            }
            Some("tool_result") => {
                let Some((contents, text)) = tool_result(block.get("content")) else {
                    return Ok(Err(Skip::Unsupported));
                };
                if role == "assistant" {
                    parts.push(json!({"type": "text", "text": format!("Tool result: {text}")}));
                    continue;
                }
                flush_user(&mut parts, out);
                let id = [block.get("tool_use_id"), block.get("id")]
                    .into_iter()
                    .flatten()
                    .find_map(|v| v.as_str().filter(|s| !s.is_empty()))
                    .unwrap_or_default();
                for content in contents {
                    out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                }
            }
            // SGLang passes over the blocks it has no conversion for.
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), role.into());
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls.clone()));
    }
    if !parts.is_empty() {
        message.insert("content".into(), single_text_or_parts(std::mem::take(&mut parts)));
    } else if calls.is_empty() {
        // A user turn of tool results alone is done; an empty assistant turn stays, as "".
        if role == "user" {
            return Ok(Ok(()));
        }
        message.insert("content".into(), "".into());
    }
    out.push(Value::Object(message));
    Ok(Ok(()))
}

/// The parts gathered before a tool result, as a user message (`_emit_user_message`).
fn flush_user(parts: &mut Vec<Value>, out: &mut Vec<Value>) {
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": single_text_or_parts(std::mem::take(parts))}));
    }
}

fn single_text_or_parts(parts: Vec<Value>) -> Value {
    match parts.as_slice() {
        [one] if one.get("type").and_then(Value::as_str) == Some("text") => one["text"].clone(),
        _ => Value::Array(parts),
    }
}

/// A tool result's contents, one tool message each, and its text (`_convert_tool_result_content`):
/// a list of text blocks is one content (their text alone when there is one, else the parts),
/// anything else its string. `None` when it holds what the proxy does not convert.
fn tool_result(content: Option<&Value>) -> Option<(Vec<Value>, String)> {
    let Some(Value::Array(items)) = content else {
        let text = match content {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return None,
        };
        return Some((vec![Value::from(text.clone())], text));
    };
    let mut parts = Vec::new();
    for item in items {
        match item.get("type").and_then(Value::as_str) {
            Some("text") => match item.get("text").and_then(Value::as_str) {
                Some(t) if !t.is_empty() => parts.push(json!({"type": "text", "text": t})),
                _ => {}
            },
            Some("image" | "tool_reference" | "search_result") => return None,
            _ => {}
        }
    }
    let text = parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n");
    let content = match parts.len() {
        0 => Value::from(""),
        _ => single_text_or_parts(parts),
    };
    Some((vec![content], text))
}

/// The custom tools, as SGLang forwards them: `{type: function, defer_loading, function: {name,
/// description, parameters, strict}}`, the schema an object's; server tools (`web_search_…`,
/// `computer_…`, `bash_…`, `text_editor_…`) dropped.
fn tools(v: Option<&Value>) -> Result<Vec<Value>, TokenizeError> {
    let tools = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(TokenizeError::Request("tools must be a list".into())),
    };
    let server = ["web_search_", "computer_", "bash_", "text_editor_"];
    let mut out = Vec::new();
    for tool in tools {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("custom");
        if server.iter().any(|p| kind.starts_with(p)) {
            continue;
        }
        let Some(Value::Object(schema)) = tool.get("input_schema") else {
            return Err(TokenizeError::Request("a custom tool needs an input_schema object".into()));
        };
        let mut schema = schema.clone();
        schema.entry("type").or_insert_with(|| "object".into());
        let description = tool.get("description").and_then(Value::as_str).unwrap_or_default();
        out.push(json!({
            "type": "function",
            "defer_loading": tool.get("defer_loading").cloned().unwrap_or(Value::Null),
            "function": {
                "name": tool.get("name").cloned().unwrap_or(Value::Null),
                "description": description,
                "parameters": schema,
                "strict": tool.get("strict").and_then(Value::as_bool).unwrap_or(false),
            },
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

//! Chat messages → the text SGLang's template renders, following SGLang 0.5.23's
//! `OpenAIServingChat._apply_jinja_template` (the Jinja path):
//!
//! 1. each message as pydantic's `model_dump()` of SGLang's message models shows it (declared
//!    fields only, in declaration order; tool calls as `{id, index, type, function}`);
//! 2. assistant tool-call `arguments` strings parsed to objects (invalid JSON → 400);
//! 3. `content: null` → `""`; list content joined with spaces for templates that expect a
//!    string, kept as `{"type": "text", …}` parts for templates that loop over it; a tool
//!    message's text parts joined; `None` fields dropped;
//! 4. a final assistant message becomes the prefix to continue (`continue_final_message`) or
//!    a user message;
//! 5. `tools` (model-dumped, filtered by a named `tool_choice`) and the template kwargs
//!    (`reasoning_effort`, `chat_template_kwargs`); a failed render is retried with the tools
//!    reduced to their `function` objects, as SGLang does for Mistral-style templates.
//!
//! Not reproduced (documented limits): server-side `--chat-template-kwargs` defaults, the
//! model-specific encoders (DeepSeek V3.2/V4, Kimi, MiniMax, harmony), and the reordering of
//! tool results for templates that read `tool_call_id`.

use serde_json::{Map, Value};

use crate::error::TokenizeError;
use crate::prompt::{ChatInput, Skip};
use crate::template::{ChatTemplate, ContentFormat};

/// The generic roles of SGLang's `ChatCompletionMessageGenericParam` (matched case-insensitively).
const GENERIC_ROLES: [&str; 7] =
    ["system", "assistant", "tool", "function", "developer", "latest_reminder", "root"];
/// Content part types that carry media.
const MEDIA_PARTS: [&str; 7] =
    ["image_url", "video_url", "audio_url", "input_image", "input_audio", "image", "file"];

/// A rendered chat prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatText {
    /// The template's output.
    pub(crate) text: String,
    /// With `continue_final_message`: the final assistant text, encoded after the prompt.
    pub(crate) assistant_prefix: Option<String>,
}

/// Renders `messages` (the request's, or a variant of them) with the request's other fields.
pub(crate) fn render(
    template: &ChatTemplate,
    input: &ChatInput,
    messages: &[Value],
) -> Result<Result<ChatText, Skip>, TokenizeError> {
    if messages.iter().any(has_media) {
        return Ok(Err(Skip::Media));
    }
    let mut prepared = Vec::with_capacity(messages.len());
    for m in messages {
        let mut m = dump_message(m)?;
        normalize_tool_call_arguments(&mut m)?;
        prepared.push(process_content(m, template.content_format()));
    }
    let mut assistant_prefix = None;
    if let Some(last) = prepared.last_mut()
        && last.get("role").and_then(Value::as_str) == Some("assistant")
        && let Some(Value::String(content)) = last.get("content")
    {
        if input.continue_final_message {
            assistant_prefix = Some(content.clone());
            prepared.pop();
        } else {
            *last =
                Map::from_iter([("role".into(), "user".into()), ("content".into(), content.clone().into())]);
        }
    }
    let messages: Vec<Value> = prepared.into_iter().map(Value::Object).collect();
    let tools = template_tools(input)?;
    let mut kwargs = Map::new();
    if let Some(effort) = &input.reasoning_effort {
        kwargs.insert("reasoning_effort".into(), effort.clone());
    }
    kwargs.extend(input.template_kwargs.iter().map(|(k, v)| (k.clone(), v.clone())));
    let text = match template.render(&messages, tools.as_deref(), &kwargs) {
        Ok(text) => text,
        Err(first) => {
            let Some(tools) = tools else { return Err(TokenizeError::Template(first)) };
            let flat: Vec<Value> = tools.iter().map(|t| t.get("function").unwrap_or(t).clone()).collect();
            template.render(&messages, Some(&flat), &kwargs).map_err(TokenizeError::Template)?
        }
    };
    Ok(Ok(ChatText { text, assistant_prefix }))
}

fn has_media(message: &Value) -> bool {
    let Some(Value::Array(parts)) = message.get("content") else { return false };
    parts.iter().any(|p| p.get("type").and_then(Value::as_str).is_some_and(|t| MEDIA_PARTS.contains(&t)))
}

fn request_error(message: &str) -> TokenizeError {
    TokenizeError::Request(message.to_owned())
}

/// `model_dump()` of `ChatCompletionMessageUserParam` (role `user`: role, content) or
/// `ChatCompletionMessageGenericParam` (every declared field, `None` when absent).
fn dump_message(m: &Value) -> Result<Map<String, Value>, TokenizeError> {
    let Some(o) = m.as_object() else { return Err(request_error("each message must be an object")) };
    let Some(role) = o.get("role").and_then(Value::as_str) else {
        return Err(request_error("a message has no role"));
    };
    let mut out = Map::new();
    if role == "user" {
        out.insert("role".into(), role.into());
        match o.get("content") {
            Some(c @ (Value::String(_) | Value::Array(_))) => out.insert("content".into(), dump_content(c)?),
            _ => return Err(request_error("a user message needs content")),
        };
        return Ok(out);
    }
    let role = role.to_lowercase();
    if !GENERIC_ROLES.contains(&role.as_str()) {
        return Err(TokenizeError::Request(format!("unknown message role {role:?}")));
    }
    let field = |name: &str| o.get(name).cloned().unwrap_or(Value::Null);
    out.insert("role".into(), role.into());
    out.insert("content".into(), dump_content(&field("content"))?);
    for name in ["tool_call_id", "name", "phase", "reasoning_content"] {
        out.insert(name.into(), field(name));
    }
    let tool_calls = match o.get("tool_calls") {
        Some(Value::Array(calls)) => {
            Value::Array(calls.iter().map(dump_tool_call).collect::<Result<_, _>>()?)
        }
        None | Some(Value::Null) => Value::Null,
        Some(_) => return Err(request_error("tool_calls must be a list")),
    };
    out.insert("tool_calls".into(), tool_calls);
    let tools = match o.get("tools") {
        Some(Value::Array(tools)) => Value::Array(tools.iter().map(dump_tool).collect::<Result<_, _>>()?),
        None | Some(Value::Null) => Value::Null,
        Some(_) => return Err(request_error("tools must be a list")),
    };
    out.insert("tools".into(), tools);
    out.insert("prefix".into(), field("prefix"));
    Ok(out)
}

/// Content as dumped: strings as they are; text parts `{type, text}`, thinking parts
/// `{type, thinking, text}`, tool references `{type, name}`.
fn dump_content(content: &Value) -> Result<Value, TokenizeError> {
    let Value::Array(parts) = content else { return Ok(content.clone()) };
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        let field = |name: &str| part.get(name).cloned().unwrap_or(Value::Null);
        let dumped = match part.get("type").and_then(Value::as_str) {
            Some("text") => serde_json::json!({"type": "text", "text": field("text")}),
            Some(t @ ("thinking" | "reasoning")) => {
                serde_json::json!({"type": t, "thinking": field("thinking"), "text": field("text")})
            }
            Some("tool_reference") => serde_json::json!({"type": "tool_reference", "name": field("name")}),
            other => return Err(TokenizeError::Request(format!("unsupported content part type {other:?}"))),
        };
        out.push(dumped);
    }
    Ok(Value::Array(out))
}

/// `ToolCall.model_dump()`: `{id, index, type, function: {name, arguments}}`.
fn dump_tool_call(call: &Value) -> Result<Value, TokenizeError> {
    let field = |v: &Value, name: &str| v.get(name).cloned().unwrap_or(Value::Null);
    let function = call.get("function").ok_or_else(|| request_error("a tool call needs a function"))?;
    Ok(serde_json::json!({
        "id": field(call, "id"),
        "index": field(call, "index"),
        "type": "function",
        "function": {"name": field(function, "name"), "arguments": field(function, "arguments")},
    }))
}

/// `Tool.model_dump()` in SGLang 0.5.23: `{type, function, defer_loading}`, the function's
/// fields in the client's order, `strict`/`defer_loading` only when set, and the declared
/// fields the client left out (`description`, `parameters`) as `None` at the end.
pub(crate) fn dump_tool(tool: &Value) -> Result<Value, TokenizeError> {
    let Some(Value::Object(function)) = tool.get("function") else {
        return Err(request_error("a tool needs a function object"));
    };
    if !function.get("name").is_some_and(Value::is_string) {
        return Err(request_error("a tool function needs a name"));
    }
    const DECLARED: [&str; 5] = ["description", "name", "parameters", "strict", "defer_loading"];
    let mut dumped = Map::new();
    for (key, value) in function {
        let optional = matches!(key.as_str(), "strict" | "defer_loading");
        if DECLARED.contains(&key.as_str()) && !(optional && value.is_null()) {
            dumped.insert(key.clone(), value.clone());
        }
    }
    for key in ["description", "name", "parameters"] {
        dumped.entry(key).or_insert(Value::Null);
    }
    let mut out = Map::new();
    out.insert("type".into(), tool.get("type").cloned().unwrap_or_else(|| "function".into()));
    out.insert("function".into(), Value::Object(dumped));
    out.insert("defer_loading".into(), tool.get("defer_loading").cloned().unwrap_or(Value::Null));
    Ok(Value::Object(out))
}

/// `normalize_assistant_tool_call_arguments`: string arguments must parse to a JSON object.
fn normalize_tool_call_arguments(m: &mut Map<String, Value>) -> Result<(), TokenizeError> {
    if m.get("role").and_then(Value::as_str) != Some("assistant") {
        return Ok(());
    }
    let Some(Value::Array(calls)) = m.get_mut("tool_calls") else { return Ok(()) };
    for call in calls {
        let Some(arguments) = call.pointer_mut("/function/arguments") else { continue };
        if let Value::String(text) = arguments {
            match serde_json::from_str::<Value>(text) {
                Ok(parsed @ Value::Object(_)) => *arguments = parsed,
                Ok(_) => return Err(request_error("tool call arguments must be a JSON object")),
                Err(_) => return Err(request_error("tool call arguments must be valid JSON")),
            }
        }
    }
    Ok(())
}

/// `process_content_for_template_format` then `normalize_tool_content`.
fn process_content(mut m: Map<String, Value>, format: ContentFormat) -> Map<String, Value> {
    if m.get("content").is_none_or(Value::is_null) {
        m.insert("content".into(), "".into());
    }
    let text_of = |part: &Value| -> Option<Value> {
        let kind = part.get("type").and_then(Value::as_str)?;
        matches!(kind, "text" | "input_text").then(|| part.get("text").cloned().unwrap_or(Value::Null))
    };
    let mut m = match (m.get("content").cloned(), format) {
        (Some(Value::Array(parts)), ContentFormat::OpenAi) => {
            let kept: Vec<Value> = parts
                .iter()
                .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                    Some("tool_reference") => Some(p.clone()),
                    _ => text_of(p).map(|text| serde_json::json!({"type": "text", "text": text})),
                })
                .collect();
            m.remove("content");
            m.retain(|_, v| !v.is_null());
            m.insert("content".into(), Value::Array(kept));
            m
        }
        (Some(Value::Array(parts)), ContentFormat::String) => {
            let texts: Vec<String> = parts.iter().filter_map(text_of).map(|t| py_str(&t)).collect();
            m.insert("content".into(), texts.join(" ").into());
            m.retain(|_, v| !v.is_null());
            m
        }
        _ => {
            m.retain(|_, v| !v.is_null());
            m
        }
    };
    if m.get("role").and_then(Value::as_str) == Some("tool")
        && let Some(Value::Array(parts)) = m.get("content")
        && parts.iter().all(|p| p.is_string() || p.get("type").and_then(Value::as_str) == Some("text"))
    {
        let joined: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                p => p.get("text").map(py_str).unwrap_or_default(),
            })
            .collect();
        m.insert("content".into(), joined.join(" ").into());
    }
    m
}

fn py_str(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// The `tools` the template sees (`None` when the request has none or `tool_choice` is `none`).
fn template_tools(input: &ChatInput) -> Result<Option<Vec<Value>>, TokenizeError> {
    let message_tools = input.messages.iter().any(|m| {
        let role = m.get("role").and_then(Value::as_str).map(str::to_lowercase);
        matches!(role.as_deref(), Some("system" | "developer" | "root"))
            && m.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty())
    });
    let choice = match &input.tool_choice {
        Value::Null if input.tools.is_empty() && !message_tools => Value::from("none"),
        Value::Null => Value::from("auto"),
        c => c.clone(),
    };
    if (input.tools.is_empty() && !message_tools) || choice.as_str() == Some("none") {
        return Ok(None);
    }
    let named = choice.pointer("/function/name").map(|n| n.as_str().unwrap_or_default().to_owned());
    let mut tools = Vec::new();
    for tool in &input.tools {
        let name = tool.pointer("/function/name").and_then(Value::as_str);
        if named.as_deref().is_none_or(|n| Some(n) == name) {
            tools.push(dump_tool(tool)?);
        }
    }
    Ok(if tools.is_empty() && (named.is_some() || input.tools.is_empty()) { None } else { Some(tools) })
}

#[cfg(test)]
mod tests;

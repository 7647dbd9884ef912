//! A request's prompt as token ids, the one rule every route that reads a prompt shares (the
//! generation routes, `/v1/tokenize`, the pooling routes): the emulator's own tokens
//! ([`crate::tokens::tokenize`], chat messages rendered as `role: content\n`), replaced by the
//! ids SGLang prefills when a real tokenizer is configured and can say.

use infera_proto::types::Api;
use serde_json::Value;

use super::{InputError, field, one};
use crate::tokens;

/// The prompt of a generation request body `b` on `route` (which must generate): by the real
/// tokenizer and chat template when given and decisive, else by the emulator's rule.
pub(crate) fn of_route(
    route: Api,
    b: &Value,
    tokenizer: Option<&infera_tokenize::Tokenizer>,
) -> Result<Vec<u32>, InputError> {
    let prompt = match route {
        Api::Generate => match (one::<String>(b, "text")?, one::<Vec<u32>>(b, "input_ids")?) {
            (Some(text), _) => tokens::tokenize(&text),
            (None, Some(ids)) => ids,
            (None, None) => {
                return Err(InputError::NoPrompt(
                    "Either text, input_ids or input_embeds should be provided.",
                ));
            }
        },
        Api::ChatCompletions => {
            let messages =
                field::<Vec<Value>>(b, "messages")?.ok_or(InputError::NoPrompt("messages is required"))?;
            tokens::tokenize(&render_messages(&messages))
        }
        Api::Completions => match b.get("prompt") {
            Some(Value::String(s)) => tokens::tokenize(s),
            Some(_) => match one::<String>(b, "prompt") {
                Ok(Some(s)) => tokens::tokenize(&s),
                _ => one::<Vec<u32>>(b, "prompt")?.unwrap_or_default(),
            },
            None => return Err(InputError::NoPrompt("prompt is required")),
        },
        Api::Responses => {
            let mut text =
                field::<String>(b, "instructions")?.map(|s| format!("system: {s}\n")).unwrap_or_default();
            match b.get("input") {
                Some(Value::String(s)) => text.push_str(&format!("user: {s}\n")),
                Some(Value::Array(items)) => text.push_str(&render_messages(items)),
                _ => return Err(InputError::NoPrompt("input is required")),
            }
            tokens::tokenize(&text)
        }
        // Anthropic's: `system` (a string or text blocks) before the messages.
        Api::Messages => {
            let messages =
                field::<Vec<Value>>(b, "messages")?.ok_or(InputError::NoPrompt("messages is required"))?;
            let system = match b.get("system") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .filter_map(|x| x.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            let system = if system.is_empty() { String::new() } else { format!("system: {system}\n") };
            tokens::tokenize(&(system + &render_messages(&messages)))
        }
        // Pooling bodies are read by `crate::api::pooling`, item by item.
        Api::Embeddings | Api::Rerank | Api::Classify => {
            return Err(InputError::NoPrompt("not a generation route"));
        }
    };
    Ok(match tokenizer {
        Some(t) => sglang_prompt(t, route, b)?.unwrap_or(prompt),
        None => prompt,
    })
}

/// The ids of one text prompt, exactly as a `/v1/completions` `prompt` string is tokenized (so
/// `/v1/tokenize` and the pooling routes count what a completion would).
pub(crate) fn of_text(
    text: &str,
    tokenizer: Option<&infera_tokenize::Tokenizer>,
) -> Result<Vec<u32>, InputError> {
    of_route(Api::Completions, &serde_json::json!({ "prompt": text }), tokenizer)
}

/// The token ids SGLang prefills for the request, by the real tokenizer and chat template.
/// `None` where the emulator keeps its own tokens: a batch, media, or a `/v1/responses` prompt
/// whose system messages SGLang versions render differently.
fn sglang_prompt(
    t: &infera_tokenize::Tokenizer,
    route: Api,
    body: &Value,
) -> Result<Option<Vec<u32>>, InputError> {
    use infera_tokenize::Outcome;
    let Value::Object(map) = body else { return Ok(None) };
    match t.tokenize(route, map, None) {
        Ok(Outcome::Tokens(tokens)) => Ok(Some(tokens.ids.to_vec())),
        Ok(Outcome::Ambiguous(_) | Outcome::Skipped(_)) => Ok(None),
        Err(e) => Err(InputError::Tokenize(e.to_string())),
    }
}

/// `role: content\n` per message; content is a string or a list of text parts.
pub(crate) fn render_messages(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        out.push_str(role);
        out.push_str(": ");
        match m.get("content") {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Array(parts)) => {
                for part in parts {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        out.push_str(t);
                    }
                }
            }
            _ => {}
        }
        out.push('\n');
    }
    out
}

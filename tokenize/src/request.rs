//! A request body → what SGLang prefills for it: token ids the client gave, text SGLang encodes
//! with the tokenizer's special tokens (`/v1/completions` `prompt`, `/generate` `text`), chat
//! messages it renders with the chat template (`/v1/chat/completions`, `/v1/responses`,
//! `/v1/messages`), or a reason the proxy cannot know (batches, media, history stored on the
//! engine).

use infera_proto::types::Api;
use serde_json::{Map, Value};

use crate::error::TokenizeError;
use crate::prompt::{ChatInput, Prompt, Skip};
use crate::{messages, responses};

/// Reads the prompt of a request body.
pub(crate) fn parse(api: Api, body: &Map<String, Value>) -> Result<Prompt, TokenizeError> {
    match api {
        Api::ChatCompletions => {
            if let Some(ids) = body.get("input_ids").filter(|v| !v.is_null()) {
                // SGLang's extension: precomputed ids bypass the template.
                return Ok(Prompt::Ids(token_ids(ids)?));
            }
            let Some(Value::Array(messages)) = body.get("messages") else {
                return Err(TokenizeError::Request("messages must be an array".into()));
            };
            Ok(Prompt::Chat(Box::new(ChatInput {
                messages: messages.clone(),
                tools: match body.get("tools") {
                    Some(Value::Array(t)) => t.clone(),
                    None | Some(Value::Null) => Vec::new(),
                    Some(_) => return Err(TokenizeError::Request("tools must be an array".into())),
                },
                tool_choice: body.get("tool_choice").cloned().unwrap_or(Value::Null),
                reasoning_effort: body.get("reasoning_effort").filter(|v| !v.is_null()).cloned(),
                template_kwargs: kwargs(body.get("chat_template_kwargs"))?,
                continue_final_message: body
                    .get("continue_final_message")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                coalesces_system: false,
            })))
        }
        Api::Responses => responses::to_chat(body),
        Api::Messages => messages::to_chat(body),
        Api::Completions => match body.get("prompt") {
            Some(p) => text_or_ids(p),
            None => Err(TokenizeError::Request("prompt is required".into())),
        },
        Api::Generate => {
            if body.get("input_embeds").is_some_and(|v| !v.is_null()) {
                return Ok(Prompt::Skip(Skip::Embeddings));
            }
            if let Some(ids) = body.get("input_ids").filter(|v| !v.is_null()) {
                return text_or_ids(ids);
            }
            match body.get("text") {
                Some(t) if !t.is_null() => text_or_ids(t),
                _ => Err(TokenizeError::Request("text or input_ids is required".into())),
            }
        }
        // SGLang encodes a pooling input as it encodes a `/v1/completions` prompt
        // (python/sglang/srt/entrypoints/openai/serving_embedding.py).
        Api::Embeddings | Api::Classify => match body.get("input") {
            Some(i) if !i.is_null() => text_or_ids(i),
            _ => Err(TokenizeError::Request("input is required".into())),
        },
        // The query with each document: one prompt per document, no one prefix.
        Api::Rerank => Ok(Prompt::Skip(Skip::Batch)),
    }
}

/// A string, a list of token ids, or a batch of them (a batch of one is its only prompt).
fn text_or_ids(v: &Value) -> Result<Prompt, TokenizeError> {
    match v {
        Value::String(s) => Ok(Prompt::Text(s.clone())),
        Value::Array(items) => match items.as_slice() {
            [] => Err(TokenizeError::Request("the prompt is empty".into())),
            [one @ (Value::String(_) | Value::Array(_))] => text_or_ids(one),
            [first, ..] if first.is_number() => Ok(Prompt::Ids(token_ids(v)?)),
            _ => Ok(Prompt::Skip(Skip::Batch)),
        },
        _ => Err(TokenizeError::Request("the prompt must be a string or token ids".into())),
    }
}

/// A JSON list of token ids.
fn token_ids(v: &Value) -> Result<Vec<u32>, TokenizeError> {
    let bad = || TokenizeError::Request("token ids must be integers in 0..2^32".into());
    let Value::Array(items) = v else { return Err(bad()) };
    items.iter().map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(bad)).collect()
}

fn kwargs(v: Option<&Value>) -> Result<Map<String, Value>, TokenizeError> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(TokenizeError::Request("chat_template_kwargs must be an object".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(api: Api, body: Value) -> Result<Prompt, TokenizeError> {
        parse(api, body.as_object().unwrap())
    }

    #[test]
    fn completions_and_generate_prompts() {
        use serde_json::json;
        assert!(
            matches!(prompt(Api::Completions, json!({"prompt": "hi"})), Ok(Prompt::Text(t)) if t == "hi")
        );
        assert!(
            matches!(prompt(Api::Completions, json!({"prompt": [1, 2]})), Ok(Prompt::Ids(i)) if i == [1, 2])
        );
        assert!(matches!(prompt(Api::Completions, json!({"prompt": [[3]]})), Ok(Prompt::Ids(i)) if i == [3]));
        assert!(matches!(
            prompt(Api::Completions, json!({"prompt": ["a", "b"]})),
            Ok(Prompt::Skip(Skip::Batch))
        ));
        assert!(
            matches!(prompt(Api::Generate, json!({"input_ids": [7, 8], "text": "x"})), Ok(Prompt::Ids(i)) if i == [7, 8])
        );
        assert!(
            matches!(prompt(Api::Generate, json!({"text": ["only"]})), Ok(Prompt::Text(t)) if t == "only")
        );
        assert!(matches!(
            prompt(Api::Generate, json!({"input_embeds": [[0.1]]})),
            Ok(Prompt::Skip(Skip::Embeddings))
        ));
        assert!(
            matches!(prompt(Api::ChatCompletions, json!({"messages": [], "input_ids": [4]})), Ok(Prompt::Ids(i)) if i == [4])
        );
        for bad in [
            json!({"input_ids": [-1]}),
            json!({"input_ids": [1.5]}),
            json!({"input_ids": [4294967296u64]}),
            json!({}),
        ] {
            assert!(matches!(prompt(Api::Generate, bad.clone()), Err(TokenizeError::Request(_))), "{bad}");
        }
    }
}

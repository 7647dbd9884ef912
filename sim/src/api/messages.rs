//! Anthropic's `POST /v1/messages` and `POST /v1/messages/count_tokens` as SGLang serves them
//! (python/sglang/srt/entrypoints/http_server.py; `AnthropicMessagesRequest`,
//! `AnthropicCountTokensRequest` in entrypoints/anthropic/protocol.py; `AnthropicServing` in
//! entrypoints/anthropic/serving.py). A message request runs as a generation ([`super::data`]),
//! answered in Anthropic's shapes (`super::render`); its errors are Anthropic's envelope
//! (`crate::error`).
//!
//! The request model's validation comes first, as FastAPI's: `model` (a non-empty string),
//! `messages` (a list) and, for a message, `max_tokens` (a positive integer). SGLang 0.5.23's
//! request carries the PD routing fields (`PDRoutingFields`); older releases' (0.5.18) drop them,
//! so a PD worker of such a release sees a request without its bootstrap room.

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use infera_proto::types::Api;
use serde_json::{Map, Value, json};

use super::input::{InputError, prompt};
use crate::app::App;
use crate::error::ApiError;
use crate::server::{self, Body};

/// Largest request body read.
const BODY_LIMIT: usize = 64 << 20;

/// The routing fields `PDRoutingFields` adds to SGLang 0.5.23's Anthropic request.
const PD_FIELDS: [&str; 5] =
    ["bootstrap_host", "bootstrap_port", "bootstrap_room", "routed_dp_rank", "disagg_prefill_dp_rank"];

/// A `/v1/messages` body as the emulated release reads it: validated, and without the PD
/// routing fields before 0.5.23.
pub(super) fn prepare(body: &[u8], sglang_version: &str) -> Result<Vec<u8>, InputError> {
    let mut b = object(body)?;
    validate(&b, true)?;
    if !super::info::at_least(sglang_version, [0, 5, 23]) {
        for key in PD_FIELDS {
            b.remove(key);
        }
    }
    Ok(serde_json::to_vec(&Value::Object(b)).expect("a JSON map serialises"))
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the prompt's tokens as a message
/// request with the same `system` and `messages` would prefill.
pub(super) async fn count_tokens(app: &App, req: Request<Incoming>) -> Response<Body> {
    let body = match server::read_body(req, BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return ApiError::Input(InputError::Body(e)).response(Api::Messages),
    };
    let counted = object(&body).and_then(|b| {
        validate(&b, false)?;
        prompt::of_route(Api::Messages, &Value::Object(b), app.config.tokenizer.as_deref())
    });
    match counted {
        Ok(ids) => server::json(StatusCode::OK, &json!({ "input_tokens": ids.len() })),
        Err(e) => ApiError::Input(e).response(Api::Messages),
    }
}

fn object(body: &[u8]) -> Result<Map<String, Value>, InputError> {
    match serde_json::from_slice(body).map_err(InputError::Json)? {
        Value::Object(map) => Ok(map),
        _ => Err(InputError::NotObject),
    }
}

/// The request model's own checks, in pydantic's words (`loc: msg`, as
/// `_anthropic_validation_message` reports them).
fn validate(b: &Map<String, Value>, needs_max_tokens: bool) -> Result<(), InputError> {
    let invalid = |key: &'static str, msg: &str| InputError::Field {
        key,
        source: <serde_json::Error as serde::de::Error>::custom(msg),
    };
    match b.get("model") {
        None => return Err(invalid("model", "Field required")),
        Some(Value::String(m)) if m.is_empty() => {
            return Err(invalid("model", "Value error, Model is required"));
        }
        Some(Value::String(_)) => {}
        Some(_) => return Err(invalid("model", "Input should be a valid string")),
    }
    match b.get("messages") {
        None => return Err(invalid("messages", "Field required")),
        Some(Value::Array(_)) => {}
        Some(_) => return Err(invalid("messages", "Input should be a valid list")),
    }
    if needs_max_tokens {
        match b.get("max_tokens") {
            None => return Err(invalid("max_tokens", "Field required")),
            Some(n) if n.as_i64().is_some_and(|n| n <= 0) => {
                return Err(invalid("max_tokens", "Value error, max_tokens must be positive"));
            }
            Some(n) if n.is_i64() => {}
            Some(_) => return Err(invalid("max_tokens", "Input should be a valid integer")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_model_is_checked_and_old_releases_drop_the_pd_fields() {
        let body = json!({"model": "m", "max_tokens": 4, "messages": [], "bootstrap_room": 7});
        let bytes = body.to_string();
        let kept: Value = serde_json::from_slice(&prepare(bytes.as_bytes(), "0.5.23").unwrap()).unwrap();
        assert_eq!(kept["bootstrap_room"], 7);
        let dropped: Value = serde_json::from_slice(&prepare(bytes.as_bytes(), "0.5.18").unwrap()).unwrap();
        assert_eq!(dropped.get("bootstrap_room"), None);
        let message = |b: Value| prepare(b.to_string().as_bytes(), "0.5.23").unwrap_err().to_string();
        assert_eq!(message(json!({"model": "m", "messages": []})), "max_tokens: Field required");
        assert_eq!(
            message(json!({"model": "m", "messages": [], "max_tokens": 0})),
            "max_tokens: Value error, max_tokens must be positive"
        );
        assert_eq!(message(json!({"max_tokens": 1, "messages": []})), "model: Field required");
        assert_eq!(message(json!({"model": "m", "max_tokens": 1})), "messages: Field required");
        assert!(validate(json!({"model": "m", "messages": []}).as_object().unwrap(), false).is_ok());
    }
}

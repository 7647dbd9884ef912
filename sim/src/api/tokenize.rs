//! `POST /v1/tokenize` (alias `/tokenize`) and `POST /v1/detokenize` (alias `/detokenize`), as
//! SGLang 0.5.23 answers them in its tokenizer manager, without the engine
//! (`OpenAIServingTokenize`, `OpenAIServingDetokenize` in
//! python/sglang/srt/entrypoints/openai/serving_tokenize.py; `TokenizeRequest`,
//! `DetokenizeRequest` in protocol.py).
//!
//! A `prompt` is tokenized exactly as a `/v1/completions` prompt string, `messages` exactly as a
//! chat completion's ([`prompt::of_route`]): what `usage.prompt_tokens` would count.
//! `max_model_len` is the context length (SGLang reports the tokenizer's `model_max_length`,
//! falling back to the context length when it is unset). `add_generation_prompt` is not
//! modelled: messages are rendered as for a chat completion.

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use infera_proto::types::Api;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::input::{InputError, field, prompt};
use crate::app::App;
use crate::error::{self, ApiError};
use crate::server::{self, Body};
use crate::tokens;

/// Largest request body read.
const BODY_LIMIT: usize = 64 << 20;

/// The error shapes of these routes: OpenAI's, as on `/v1/completions`.
const SHAPES: Api = Api::Completions;

/// `POST /v1/tokenize`.
pub(super) async fn tokenize(app: &App, req: Request<Incoming>) -> Response<Body> {
    let body = match read(req).await {
        Ok(b) => b,
        Err(e) => return ApiError::Input(e).response(SHAPES),
    };
    match tokens_of(app, &body) {
        Ok(answer) => server::json(StatusCode::OK, &answer),
        Err(e) => ApiError::Input(e).response(SHAPES),
    }
}

/// The body of `req` as a JSON object.
async fn read(req: Request<Incoming>) -> Result<Map<String, Value>, InputError> {
    let body = server::read_body(req, BODY_LIMIT).await?;
    match serde_json::from_slice(&body).map_err(InputError::Json)? {
        Value::Object(map) => Ok(map),
        _ => Err(InputError::NotObject),
    }
}

/// A `prompt`: one text or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

/// The `TokenizeResponse` for `body`.
fn tokens_of(app: &App, body: &Map<String, Value>) -> Result<Value, InputError> {
    let b = Value::Object(body.clone());
    let prompt_field = field::<Prompt>(&b, "prompt")?;
    let messages = field::<Vec<Value>>(&b, "messages")?;
    let add_special_tokens = field::<bool>(&b, "add_special_tokens")?.unwrap_or(true);
    let tokenizer = app.config.tokenizer.as_deref();
    let max_model_len = app.config.context_length;
    let encode = |text: &str| match tokenizer {
        Some(t) if !add_special_tokens => {
            t.encode(text, false).map_err(|e| InputError::Tokenize(e.to_string()))
        }
        _ => prompt::of_text(text, tokenizer),
    };
    match (prompt_field, messages) {
        (None, Some(messages)) => {
            if messages.is_empty() {
                return Err(InputError::Invalid("Messages cannot be empty.".into()));
            }
            // `to_chat_completion_request` leaves these out.
            let mut chat = body.clone();
            chat.remove("prompt");
            chat.remove("add_special_tokens");
            let ids = prompt::of_route(Api::ChatCompletions, &Value::Object(chat), tokenizer)?;
            Ok(json!({ "tokens": ids, "count": ids.len(), "max_model_len": max_model_len }))
        }
        (Some(Prompt::One(text)), None) => {
            let ids = encode(&text)?;
            Ok(json!({ "tokens": ids, "count": ids.len(), "max_model_len": max_model_len }))
        }
        (Some(Prompt::Many(texts)), None) => {
            let lists = texts.iter().map(|t| encode(t)).collect::<Result<Vec<_>, _>>()?;
            let counts: Vec<usize> = lists.iter().map(Vec::len).collect();
            Ok(json!({ "tokens": lists, "count": counts, "max_model_len": max_model_len }))
        }
        // The model validator, which FastAPI reports as a validation error.
        _ => Err(InputError::Field {
            key: "prompt",
            source: <serde_json::Error as serde::de::Error>::custom(
                "Value error, Exactly one of 'prompt' or 'messages' must be provided.",
            ),
        }),
    }
}

/// `tokens`: one list of ids or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Ids {
    One(Vec<i64>),
    Many(Vec<Vec<i64>>),
}

/// `POST /v1/detokenize`: with a tokenizer, its decode; without, [`tokens::detokenize`].
pub(super) async fn detokenize(app: &App, req: Request<Incoming>) -> Response<Body> {
    let body = match read(req).await.map(Value::Object) {
        Ok(b) => b,
        Err(e) => return ApiError::Input(e).response(SHAPES),
    };
    let parsed = field::<Ids>(&body, "tokens")
        .and_then(|ids| ids.ok_or(InputError::NoPrompt("tokens: Field required")))
        .and_then(|ids| Ok((ids, field::<bool>(&body, "skip_special_tokens")?.unwrap_or(true))));
    let (ids, skip_special_tokens) = match parsed {
        Ok(p) => p,
        Err(e) => return ApiError::Input(e).response(SHAPES),
    };
    let decode = |ids: &[i64]| -> Result<String, String> {
        // Python's tokenizer refuses a negative id before decoding anything.
        let ids: Vec<u32> = ids
            .iter()
            .map(|&t| u32::try_from(t).map_err(|_| "can't convert negative int to unsigned".to_owned()))
            .collect::<Result<_, _>>()?;
        match app.config.tokenizer.as_deref() {
            Some(t) => t.backend().decode(&ids, skip_special_tokens).map_err(|e| e.to_string()),
            None => Ok(tokens::detokenize(&ids)),
        }
    };
    let text = match &ids {
        Ids::One(one) => decode(one).map(Value::String),
        Ids::Many(many) => {
            many.iter().map(|one| decode(one)).collect::<Result<Vec<_>, _>>().map(|t| json!(t))
        }
    };
    match text {
        Ok(text) => server::json(StatusCode::OK, &json!({ "text": text })),
        Err(e) => {
            let message = format!("Internal server error during detokenization: {e}");
            server::json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &error::openai(StatusCode::INTERNAL_SERVER_ERROR, &message),
            )
        }
    }
}

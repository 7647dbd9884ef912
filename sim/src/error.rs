//! Why a data-plane request failed, and the one place that turns it into SGLang's error
//! shapes: OpenAI routes `{"object":"error","message","type","param":null,"code"}`, `/generate`
//! `{"error":{"message"}}`, `/v1/messages` Anthropic's `{"type":"error","error":{"type",
//! "message"}}`, and inside a stream an `{"error": …}` event (then `[DONE]`; Anthropic's `error`
//! event, then `message_stop`).

use hyper::{Response, StatusCode};
use infera_proto::types::Api;
use serde_json::{Value, json};

use crate::api::input::InputError;
use crate::pull::PullError;
use crate::ranks::RankError;
use crate::rooms::RoomInUse;
use crate::server::{self, Body};

/// A data-plane failure.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request body cannot be read or parsed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The DP rank asked for cannot serve the request.
    #[error(transparent)]
    Rank(#[from] RankError),
    /// The room is taken.
    #[error(transparent)]
    Room(#[from] RoomInUse),
    /// A PD role without bootstrap fields (SGLang's words).
    #[error("Invalid request: Disaggregated request received without bootstrap room id. req.rid='{rid}'")]
    MissingBootstrap {
        /// The request's id.
        rid: String,
    },
    /// `--sim-fail-next` / `POST /sim/faults`.
    #[error("Internal server error: injected failure (infera-sim fail_next)")]
    Injected,
    /// A pooling request (embeddings, classify, a cross-encoder rerank) to a model that
    /// generates, in SGLang's words (`_validate_one_request` in
    /// python/sglang/srt/managers/tokenizer_manager.py).
    #[error(
        "This model does not appear to be an embedding model by default. Please add `--is-embedding` when launching the server or try another model."
    )]
    NotEmbedding,
    /// A generation request to a model that does not generate. SGLang has no check of its own
    /// (the request reaches the pooling model's forward pass, whose output is no generation);
    /// the sim refuses it up front.
    #[error(
        "This model is served as an embedding model (`--is-embedding` or a pooling architecture) and does not generate; send it /v1/embeddings, /v1/classify or /v1/rerank."
    )]
    NotGenerative,
    /// What SGLang answers when a Python exception escapes a handler (`handle_request` in
    /// python/sglang/srt/entrypoints/openai/serving_base.py): the exception's text.
    #[error("Internal server error: {0}")]
    Internal(String),
    /// The decode did not get its KV.
    #[error(transparent)]
    Pull(#[from] PullError),
    /// The prefill's KV transfer failed.
    #[error("KV transfer failed for bootstrap_room {room}: {reason}")]
    Transfer {
        /// The request's `bootstrap_room`.
        room: u64,
        /// What failed in the transfer.
        reason: String,
    },
    /// No decode pulled the prefill's KV in time.
    #[error("bootstrap_room {room}: no decode pulled the KV within {ms} ms (bootstrap timeout)")]
    PrefillTimeout {
        /// The request's `bootstrap_room`.
        room: u64,
        /// The bootstrap timeout waited, in milliseconds.
        ms: u128,
    },
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Input(_)
            | ApiError::Room(_)
            | ApiError::MissingBootstrap { .. }
            | ApiError::NotEmbedding
            | ApiError::NotGenerative => StatusCode::BAD_REQUEST,
            ApiError::Rank(RankError::OutOfRange { .. }) => StatusCode::BAD_REQUEST,
            ApiError::Rank(RankError::FollowConflict { .. })
            | ApiError::Injected
            | ApiError::Internal(_)
            | ApiError::Pull(_)
            | ApiError::Transfer { .. }
            | ApiError::PrefillTimeout { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error as a whole response for `route`.
    pub fn response(&self, route: Api) -> Response<Body> {
        let status = self.status();
        if route.is_anthropic() {
            return server::json(status, &anthropic(status, &self.to_string()));
        }
        if let ApiError::Input(e) = self
            && e.is_validation(route)
        {
            return server::json(status, &validation(route, &e.to_string()));
        }
        let body = if route.is_openai() {
            openai(status, &self.to_string())
        } else {
            json!({ "error": { "message": self.to_string() } })
        };
        server::json(status, &body)
    }

    /// The error as the JSON of one SSE event for `route`.
    pub fn stream_event(&self, route: Api) -> Value {
        let status = self.status();
        if route.is_anthropic() {
            return anthropic(status, &self.to_string());
        }
        if route.is_openai() {
            json!({ "error": openai(status, &self.to_string()) })
        } else {
            let kind =
                if status == StatusCode::BAD_REQUEST { "invalid_request_error" } else { "internal_error" };
            json!({ "error": {
                "message": self.to_string(), "type": kind, "code": status.as_u16(), "retryable": false,
            }})
        }
    }
}

/// SGLang's answer to a request FastAPI could not validate (`validation_exception_handler` in
/// python/sglang/srt/entrypoints/http_server.py): `ErrorResponse` with the type `Bad Request`,
/// nested under `error` on `/v1/responses`.
pub fn validation(route: Api, message: &str) -> Value {
    let error =
        json!({ "object": "error", "message": message, "type": "Bad Request", "param": null, "code": 400 });
    match route {
        Api::Responses => {
            json!({ "error": { "message": message, "type": "Bad Request", "param": null, "code": 400 } })
        }
        _ => error,
    }
}

/// SGLang's Anthropic error envelope (`_anthropic_error_response` in
/// python/sglang/srt/entrypoints/http_server.py, `_error_response` in
/// entrypoints/anthropic/serving.py): the type named by the status (`ERROR_TYPE_MAP`), a 5xx's
/// message never the exception's (`_scrub_error_message`).
pub fn anthropic(status: StatusCode, message: &str) -> Value {
    let kind = match status.as_u16() {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 => "request_timeout_error",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        _ => "api_error",
    };
    let message = if status.is_server_error() { "Internal server error" } else { message };
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

/// SGLang's OpenAI error object.
pub fn openai(status: StatusCode, message: &str) -> Value {
    let kind = match status {
        StatusCode::BAD_REQUEST => "BadRequestError",
        StatusCode::NOT_FOUND => "NotFoundError",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableError",
        _ => "InternalServerError",
    };
    json!({ "object": "error", "message": message, "type": kind, "param": null, "code": status.as_u16() })
}

//! The shape a route's errors take on the wire: OpenAI's `{"error": {"message", "type", "param",
//! "code"}}` on every route but one, Anthropic's `{"type": "error", "error": {"type", "message"}}`
//! on `/v1/messages` and `/v1/messages/count_tokens`, as SGLang answers there
//! (`_anthropic_error_response` in python/sglang/srt/entrypoints/http_server.py). A proxy error is
//! rendered in one of them where it leaves the proxy: [`crate::error::ProxyError::respond`] before
//! an answer began, [`crate::error::ProxyError::sse_event`] once a stream has.

use bytes::Bytes;
use http::StatusCode;
use infera_proto::types::Api;
use serde_json::{Value, json};

/// An error envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Envelope {
    /// OpenAI's (and the proxy's own routes').
    OpenAi,
    /// Anthropic's.
    Anthropic,
}

impl Envelope {
    /// The envelope of `api`'s errors.
    pub fn of(api: Api) -> Self {
        if api.is_anthropic() { Self::Anthropic } else { Self::OpenAi }
    }

    /// The error body: `openai` is the OpenAI object the proxy builds for every route; the
    /// Anthropic one keeps its message and names the Anthropic type of `status`.
    pub fn body(self, status: StatusCode, openai: Value) -> Value {
        match self {
            Self::OpenAi => openai,
            Self::Anthropic => {
                let message = openai.pointer("/error/message").cloned().unwrap_or(Value::Null);
                json!({"type": "error", "error": {"type": anthropic_type(status), "message": message}})
            }
        }
    }

    /// The error as the last events of a stream: OpenAI's `data: {"error": …}` and `[DONE]`;
    /// Anthropic's `error` event and `message_stop`, as SGLang ends a failed stream
    /// (`_flush_on_error` in python/sglang/srt/entrypoints/anthropic/serving.py).
    pub fn stream_end(self, status: StatusCode, openai: Value) -> Bytes {
        match self {
            Self::OpenAi => Bytes::from(format!("data: {openai}\n\ndata: [DONE]\n\n")),
            Self::Anthropic => Bytes::from(format!(
                "event: error\ndata: {}\n\nevent: message_stop\ndata: {}\n\n",
                self.body(status, openai),
                json!({"type": "message_stop"}),
            )),
        }
    }
}

/// Anthropic's error type for an HTTP status (SGLang's `ERROR_TYPE_MAP`,
/// python/sglang/srt/entrypoints/anthropic/serving.py; 413 as its HTTP exception handler).
fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 => "request_timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_errors_keep_the_message_and_name_the_status() {
        let openai = json!({"error": {"message": "no", "type": "invalid_request_error", "param": null}});
        assert_eq!(Envelope::of(Api::ChatCompletions).body(StatusCode::BAD_REQUEST, openai.clone()), openai);
        let a = Envelope::of(Api::Messages).body(StatusCode::BAD_REQUEST, openai.clone());
        assert_eq!(a, json!({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}));
        let busy = Envelope::Anthropic.body(StatusCode::SERVICE_UNAVAILABLE, openai.clone());
        assert_eq!(busy["error"]["type"], "overloaded_error");
        assert_eq!(
            Envelope::Anthropic.body(StatusCode::UNAUTHORIZED, openai.clone())["error"]["type"],
            "authentication_error"
        );
        assert_eq!(
            Envelope::Anthropic.body(StatusCode::BAD_GATEWAY, openai.clone())["error"]["type"],
            "api_error"
        );
        let end = Envelope::Anthropic.stream_end(StatusCode::BAD_GATEWAY, openai);
        let end = std::str::from_utf8(&end).unwrap();
        let data = end.strip_prefix("event: error\ndata: ").and_then(|r| r.split("\n\n").next()).unwrap();
        let data: Value = serde_json::from_str(data).unwrap();
        assert_eq!(data, json!({"type": "error", "error": {"type": "api_error", "message": "no"}}));
        assert!(end.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), "{end}");
        assert!(!end.contains("[DONE]"));
    }
}

//! The proxy's errors, classified by where they came from and whether a retry can help, and
//! the one mapping of them to HTTP: an OpenAI-style error JSON (Anthropic's on `/v1/messages`,
//! [`Envelope`]), or an SSE error event once a stream has begun.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;
use infera_proto::types::{LegFailure, ModelName, RequestId};
use serde_json::json;

use crate::body::{Body, full};
use crate::envelope::Envelope;

/// Which side of the proxy an error came from (labels metrics; decides retries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorSource {
    /// The client's request.
    Downstream,
    /// A worker or control.
    Upstream,
    /// The proxy itself.
    Internal,
}

/// Which PD leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leg {
    /// The prefill leg.
    Prefill,
    /// The decode leg (or the only leg of an aggregated request).
    Decode,
}

impl Leg {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }
}

impl std::fmt::Display for Leg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What was full when a request was refused as overloaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overload {
    /// The proxy's queue (`--queue-depth`).
    QueueFull,
    /// No place in flight (`--max-inflight`) within `--queue-timeout-ms`.
    QueueTimeout,
    /// Every rank at its cap in control, for as long as the request could wait.
    AtCapacity,
    /// The request bodies being read and served fill `--max-body-bytes-in-flight`.
    BodyBudget,
    /// Control's fleet admission could not admit it within its class's TTFT target.
    Shed,
}

impl Overload {
    /// The `reason` label of `infera_proxy_rejected_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::QueueTimeout => "queue_timeout",
            Self::AtCapacity => "at_capacity",
            Self::BodyBudget => "body_budget",
            Self::Shed => "shed",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::QueueFull => "the proxy's queue is full",
            Self::QueueTimeout => "no place in flight within the queue timeout",
            Self::AtCapacity => "every rank is at its cap",
            Self::BodyBudget => "the request bodies in flight fill --max-body-bytes-in-flight",
            Self::Shed => "no decode rank could take it within its service class's targets in time",
        }
    }
}

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Body over the limit.
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// `--max-body-bytes`.
        limit: usize,
    },
    /// A body that parses into more JSON values than `--max-body-values` allows.
    #[error("request body holds {values} JSON values, more than the limit of {limit}")]
    BodyTooComplex {
        /// The values it holds.
        values: usize,
        /// `--max-body-values`.
        limit: usize,
    },
    /// An id, a name or a session key over the length limit.
    #[error("{what} is longer than {limit} bytes")]
    TooLong {
        /// Which: `x-request-id`, `x-session-id`, `model`, `rid`, `user`, …
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// The body did not arrive within `--body-read-timeout-ms` of the head.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(Duration),
    /// Body not JSON.
    #[error("request body is not valid JSON: {0}")]
    BadJson(#[source] serde_json::Error),
    /// JSON of the wrong shape.
    #[error("{0}")]
    BadRequest(&'static str),
    /// No such route.
    #[error("no route for {method} {path}")]
    NoRoute {
        /// The request's method.
        method: http::Method,
        /// The request's path.
        path: String,
    },
    /// No worker serves the model.
    #[error("model \"{0}\" does not exist")]
    UnknownModel(ModelName),
    /// Nothing can take the request now.
    #[error("no healthy {leg} target for model \"{model}\"")]
    NoTarget {
        /// The model the request was routed for.
        model: ModelName,
        /// The leg that found no target.
        leg: Leg,
    },
    /// A pooling API (embeddings, rerank, classify) for a model served prefill/decode: SGLang
    /// serves pooling models on aggregated workers only.
    #[error(
        "model \"{model}\" is served by prefill/decode workers; {path} needs a worker that serves it whole (SGLang runs pooling models without --disaggregation-mode)"
    )]
    NotAggregated {
        /// The model.
        model: ModelName,
        /// The API's path.
        path: &'static str,
    },
    /// An API the SGLang release of the model's prefill/decode workers cannot serve through a
    /// pair (`/v1/messages` before 0.5.23 drops the bootstrap fields).
    #[error(
        "model \"{model}\" is served by prefill/decode workers running SGLang {version}, which cannot serve {path} through a prefill/decode pair (its request drops the bootstrap fields; SGLang 0.5.23 serves it)"
    )]
    NotServedPd {
        /// The model.
        model: ModelName,
        /// The API's path.
        path: &'static str,
        /// The release of the worker that cannot.
        version: String,
    },
    /// The model's prefill and decode workers cannot pair (KV page size, transfer backend or KV
    /// cache dtype differ): no request can be served until a compatible one registers.
    #[error("{0}")]
    NoCompatiblePair(String),
    /// The request names a service class control does not define: control's message.
    #[error("{0}")]
    UnknownServiceClass(String),
    /// A leg could not be sent or its connection broke.
    #[error("{leg} worker {url}: {reason}")]
    Upstream {
        /// The leg that failed.
        leg: Leg,
        /// The worker's base URL.
        url: String,
        /// What happened.
        reason: String,
        /// How, for outlier ejection: no connection, or one that broke.
        failure: LegFailure,
    },
    /// A leg answered with an error status.
    #[error("{leg} worker {url} answered {status}: {body}")]
    UpstreamStatus {
        /// The leg that failed.
        leg: Leg,
        /// The worker's base URL.
        url: String,
        /// The worker's HTTP status.
        status: StatusCode,
        /// The worker's error message (its JSON `message`, else its body text).
        body: String,
    },
    /// The whole request took too long.
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    /// `--api-keys` is set and the request carries no listed key.
    #[error(
        "invalid API key: send `Authorization: Bearer <key>` (or `x-api-key: <key>`) with a key this proxy lists"
    )]
    Unauthorized,
    /// The key is over its tokens-per-second limit.
    #[error("API key {key} is over its rate limit; retry after {}s", retry_after.as_secs().max(1))]
    RateLimited {
        /// The key's name.
        key: std::sync::Arc<str>,
        /// The `Retry-After` the client is given.
        retry_after: Duration,
    },
    /// No room for the request now: this proxy's in-flight limit with its queue full or waited
    /// out, or every rank at its cap in control. The client may retry after `retry_after`.
    #[error("overloaded: {}; retry after {}s", why.describe(), retry_after.as_secs().max(1))]
    Overloaded {
        /// What was full.
        why: Overload,
        /// The `Retry-After` the client is given.
        retry_after: Duration,
    },
}

impl ProxyError {
    /// Where it came from.
    pub fn source_side(&self) -> ErrorSource {
        match self {
            Self::BodyTooLarge { .. }
            | Self::BodyTooComplex { .. }
            | Self::TooLong { .. }
            | Self::BodyTimeout(_)
            | Self::BadJson(_)
            | Self::BadRequest(_)
            | Self::NotAggregated { .. }
            | Self::NotServedPd { .. }
            | Self::NoRoute { .. }
            | Self::Unauthorized
            | Self::UnknownServiceClass(_)
            | Self::RateLimited { .. } => ErrorSource::Downstream,
            Self::UnknownModel(_)
            | Self::NoTarget { .. }
            | Self::NoCompatiblePair(_)
            | Self::Overloaded { .. } => ErrorSource::Internal,
            Self::Upstream { .. } | Self::UpstreamStatus { .. } | Self::Timeout(_) => ErrorSource::Upstream,
        }
    }

    /// A leg's failure on a worker: the leg, and how it failed when that counts against the
    /// worker's target (connect, 5xx, a broken connection; not a 4xx, which is the request's).
    pub fn leg_failure(&self) -> Option<(Leg, Option<LegFailure>)> {
        match self {
            Self::Upstream { leg, failure, .. } => Some((*leg, Some(*failure))),
            Self::UpstreamStatus { leg, status, .. } => {
                Some((*leg, status.is_server_error().then_some(LegFailure::ServerError)))
            }
            _ => None,
        }
    }

    /// A leg that could not be sent or whose connection broke (hyper's error `e`, with its
    /// causes: "client error (Connect)" alone says nothing).
    pub fn upstream(leg: Leg, url: &str, e: &hyper_util::client::legacy::Error) -> Self {
        let failure = if e.is_connect() { LegFailure::Connect } else { LegFailure::StreamCut };
        let mut reason = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            reason.push_str(": ");
            reason.push_str(&c.to_string());
            cause = c.source();
        }
        Self::Upstream { leg, url: url.to_owned(), reason, failure }
    }

    /// Whether a new pick could succeed where this attempt failed (nothing reached the client).
    pub fn retryable(&self) -> bool {
        match self {
            Self::Upstream { .. } => true,
            Self::UpstreamStatus { status, .. } => {
                matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
            }
            _ => false,
        }
    }

    /// The HTTP status for the client.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BodyTooLarge { .. } | Self::BodyTooComplex { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooLong { .. } => StatusCode::BAD_REQUEST,
            Self::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::BadJson(_)
            | Self::BadRequest(_)
            | Self::NotAggregated { .. }
            | Self::NotServedPd { .. }
            | Self::UnknownServiceClass(_) => StatusCode::BAD_REQUEST,
            Self::NoRoute { .. } | Self::UnknownModel(_) => StatusCode::NOT_FOUND,
            Self::NoTarget { .. } | Self::NoCompatiblePair(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Upstream { failure: LegFailure::Timeout, .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Upstream { .. } => StatusCode::BAD_GATEWAY,
            Self::UpstreamStatus { status, .. } if status.is_client_error() => *status,
            Self::UpstreamStatus { .. } => StatusCode::BAD_GATEWAY,
            Self::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            Self::BodyTooLarge { .. } | Self::BodyTooComplex { .. } => {
                ("invalid_request_error", "request_too_large")
            }
            Self::TooLong { .. } => ("invalid_request_error", "invalid_request"),
            Self::BodyTimeout(_) => ("invalid_request_error", "request_timeout"),
            Self::BadJson(_) | Self::BadRequest(_) => ("invalid_request_error", "invalid_request"),
            Self::NotAggregated { .. } => ("invalid_request_error", "model_not_served_aggregated"),
            Self::NotServedPd { .. } => ("invalid_request_error", "model_not_served_pd"),
            Self::NoRoute { .. } => ("invalid_request_error", "not_found"),
            Self::UnknownModel(_) => ("invalid_request_error", "model_not_found"),
            Self::NoTarget { .. } => ("server_error", "no_healthy_target"),
            Self::NoCompatiblePair(_) => ("server_error", "no_compatible_pd_pair"),
            Self::UnknownServiceClass(_) => ("invalid_request_error", "unknown_service_class"),
            Self::Upstream { .. } | Self::UpstreamStatus { .. } => ("server_error", "upstream_error"),
            Self::Timeout(_) => ("server_error", "timeout"),
            Self::Overloaded { .. } => ("server_error", "overloaded"),
            Self::Unauthorized => ("invalid_request_error", "invalid_api_key"),
            Self::RateLimited { .. } => ("tokens", "rate_limit_exceeded"),
        }
    }

    /// The OpenAI-style error object. Its message names no worker address: the client learns
    /// which leg failed and how, the logs (this error's `Display`) where.
    pub fn json(&self) -> serde_json::Value {
        let (ty, code) = self.kind();
        json!({"error": {"message": self.client_message(), "type": ty, "param": null, "code": code}})
    }

    /// The message a client is shown: the `Display` text without internal URLs.
    pub fn client_message(&self) -> String {
        match self {
            Self::Upstream { leg, reason, .. } => format!("{leg} worker: {reason}"),
            Self::UpstreamStatus { leg, status, body, .. } => {
                format!("{leg} worker answered {status}: {body}")
            }
            other => other.to_string(),
        }
    }

    /// The error as the client sees it before any byte of an answer was sent, in OpenAI's
    /// envelope.
    pub fn into_response(self, request_id: &RequestId) -> Response<Body> {
        self.respond(Envelope::OpenAi, request_id)
    }

    /// The error as the client sees it before any byte of an answer was sent, in `envelope`.
    pub fn respond(self, envelope: Envelope, request_id: &RequestId) -> Response<Body> {
        let mut r = Response::new(full(envelope.body(self.status(), self.json()).to_string()));
        *r.status_mut() = self.status();
        r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
        if let Ok(v) = header::HeaderValue::from_str(request_id.as_str()) {
            r.headers_mut().insert("x-request-id", v);
        }
        if let Self::Overloaded { retry_after, .. } | Self::RateLimited { retry_after, .. } = &self {
            let secs = (retry_after.as_secs_f64().ceil() as u64).max(1).to_string();
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_str(&secs).expect("digits"));
        }
        r
    }

    /// The error as the last SSE events, once a stream has begun: `data: {"error": …}` and
    /// `[DONE]` (Anthropic's `error` and `message_stop` events on `/v1/messages`).
    pub fn sse_event(&self, envelope: Envelope) -> Bytes {
        envelope.stream_end(self.status(), self.json())
    }
}

/// Reads an error body from a worker, bounded, for the message.
pub async fn upstream_error_text(body: hyper::body::Incoming) -> String {
    match http_body_util::Limited::new(body, 16 << 10).collect().await {
        Ok(b) => {
            let bytes = b.to_bytes();
            let text = String::from_utf8_lossy(&bytes);
            // SGLang: {"error": {"message"}} (native) or {"message"} (OpenAI routes).
            serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .or_else(|| v.get("message"))
                        .and_then(|m| m.as_str().map(str::to_owned))
                })
                .unwrap_or_else(|| text.trim().to_owned())
        }
        Err(e) => format!("(unreadable error body: {e})"),
    }
}

#[cfg(test)]
mod tests;

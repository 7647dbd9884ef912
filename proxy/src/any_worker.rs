//! Requests any worker of a model answers alike, sent to one without a pick: they hold nothing
//! the ledger counts. SGLang's tokenizer routes (`POST /v1/tokenize`, `/v1/detokenize`,
//! Anthropic's `/v1/messages/count_tokens`), the model's and the server's facts (`GET /get_model_info`, `/get_server_info`), and
//! `GET /health_generate`, which asks one worker of each role of a model to generate.
//!
//! The model is the body's `model` (POST), `?model=` (GET), or the deployment's only model. A
//! request goes to a random worker of the model that takes requests now
//! ([`crate::targets::TargetList::workers_of`]), and to the next when that one cannot be
//! reached; the worker's answer, status and body, is the client's.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use infera_proto::types::{ModelName, RequestId, Role};
use serde_json::{Value, json};

use crate::body::Body;
use crate::error::{Leg, ProxyError};
use crate::targets::Endpoint;
use crate::upstream::Upstreams;

/// A request any worker of the model answers alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Info {
    /// `POST /v1/tokenize` (SGLang's alias `/tokenize`).
    Tokenize,
    /// `POST /v1/detokenize` (alias `/detokenize`).
    Detokenize,
    /// `POST /v1/messages/count_tokens` (Anthropic's; SGLang renders the messages as
    /// `/v1/messages` would and counts the prompt's tokens).
    CountTokens,
    /// `GET /get_model_info` (alias `/model_info`).
    ModelInfo,
    /// `GET /get_server_info` (alias `/server_info`).
    ServerInfo,
}

impl Info {
    /// The request served at `method` `path`, SGLang's aliases included
    /// (python/sglang/srt/entrypoints/http_server.py).
    pub fn of(method: &Method, path: &str) -> Option<Self> {
        match (method, path) {
            (&Method::POST, "/v1/tokenize" | "/tokenize") => Some(Self::Tokenize),
            (&Method::POST, "/v1/detokenize" | "/detokenize") => Some(Self::Detokenize),
            (&Method::POST, "/v1/messages/count_tokens") => Some(Self::CountTokens),
            (&Method::GET, "/get_model_info" | "/model_info") => Some(Self::ModelInfo),
            (&Method::GET, "/get_server_info" | "/server_info") => Some(Self::ServerInfo),
            _ => None,
        }
    }

    /// The path the worker is asked on.
    fn worker_path(self) -> &'static str {
        match self {
            Self::Tokenize => "/v1/tokenize",
            Self::Detokenize => "/v1/detokenize",
            Self::CountTokens => "/v1/messages/count_tokens",
            Self::ModelInfo => "/get_model_info",
            Self::ServerInfo => "/get_server_info",
        }
    }

    /// The `api` label of `infera_proxy_requests_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Tokenize => "tokenize",
            Self::Detokenize => "detokenize",
            Self::CountTokens => "count_tokens",
            Self::ModelInfo => "get_model_info",
            Self::ServerInfo => "get_server_info",
        }
    }

    fn method(self) -> Method {
        if matches!(self, Self::Tokenize | Self::Detokenize | Self::CountTokens) {
            Method::POST
        } else {
            Method::GET
        }
    }

    /// The envelope of the errors the proxy answers on this route (Anthropic's on
    /// `/v1/messages/count_tokens`, as SGLang's).
    pub fn envelope(self) -> crate::envelope::Envelope {
        match self {
            Self::CountTokens => crate::envelope::Envelope::Anthropic,
            _ => crate::envelope::Envelope::OpenAi,
        }
    }
}

/// What sending to a worker needs besides the client.
#[derive(Debug)]
pub struct Asked<'a> {
    /// Workers, control, metrics.
    pub up: &'a Upstreams,
    /// The request's id (`x-request-id` to the worker and back).
    pub request_id: &'a RequestId,
    /// The client's `authorization`, when the proxy forwards it.
    pub authorization: Option<&'a http::HeaderValue>,
    /// How long the whole request may take.
    pub timeout: Duration,
}

/// Sends `info` for `model` (`None`: the deployment's only one), with `body` for a POST, to a
/// worker of the model, and relays its answer.
///
/// # Errors
/// An unknown model or none named where several are served (400/404), no worker taking requests
/// (503), none reachable (502), or the timeout (504).
pub async fn forward(
    asked: &Asked<'_>,
    info: Info,
    model: Option<ModelName>,
    body: Bytes,
) -> Result<Response<Body>, ProxyError> {
    let model = model_or_only(asked.up, model)?;
    let workers = asked.up.link.targets().workers_of(&model);
    if workers.is_empty() {
        return Err(ProxyError::NoTarget { model, leg: Leg::Decode });
    }
    let start = rand::random_range(0..workers.len());
    let mut last = None;
    for endpoint in workers.iter().cycle().skip(start).take(workers.len()) {
        let req = request(asked, info.method(), &format!("{}{}", endpoint.url, info.worker_path()), &body);
        match tokio::time::timeout(asked.timeout, asked.up.client.request(req)).await {
            Err(_) => return Err(ProxyError::Timeout(asked.timeout)),
            Ok(Ok(response)) => {
                let (head, body) = response.into_parts();
                return Ok(Response::from_parts(head, body.map_err(Into::into).boxed()));
            }
            // Not reached: the next worker.
            Ok(Err(e)) => last = Some(ProxyError::upstream(Leg::Decode, &endpoint.url, &e)),
        }
    }
    Err(last.expect("at least one worker was tried"))
}

/// `GET /health_generate`: one worker of each role of each model (or of `model`) generates a
/// token (SGLang's own `/health_generate` on it), all at once. 200 when every one answered 200;
/// 503 with each failure named otherwise, or when a model has no worker taking requests.
pub async fn health_generate(asked: &Asked<'_>, model: Option<ModelName>) -> (StatusCode, Value) {
    let list = asked.up.link.targets();
    let models = match model {
        Some(m) => vec![m],
        None => list.models(),
    };
    let mut probes: Vec<(ModelName, Endpoint)> = Vec::new();
    let mut failures: Vec<Value> = Vec::new();
    for model in models {
        let workers = list.workers_of(&model);
        if workers.is_empty() {
            failures.push(json!({"model": model.as_str(), "error": "no worker takes requests"}));
        }
        for role in [Role::Prefill, Role::Decode, Role::Mixed] {
            let mut of_role: Vec<&Endpoint> = workers.iter().filter(|e| e.role == role).collect();
            if of_role.is_empty() {
                continue;
            }
            let pick = of_role.swap_remove(rand::random_range(0..of_role.len()));
            probes.push((model.clone(), pick.clone()));
        }
    }
    let checks = probes.iter().map(|(model, endpoint)| async move {
        let req = request(asked, Method::GET, &format!("{}/health_generate", endpoint.url), &Bytes::new());
        let outcome = match tokio::time::timeout(asked.timeout, asked.up.client.request(req)).await {
            Err(_) => Err(format!("no answer within {:?}", asked.timeout)),
            Ok(Err(e)) => Err(ProxyError::upstream(Leg::Decode, &endpoint.url, &e).client_message()),
            Ok(Ok(r)) if r.status() == StatusCode::OK => Ok(()),
            Ok(Ok(r)) => Err(format!("answered {}", r.status())),
        };
        outcome.err().map(|error| {
            json!({"model": model.as_str(), "worker": endpoint.worker_id.as_str(),
                   "role": endpoint.role.as_str(), "error": error})
        })
    });
    failures.extend(futures_util::future::join_all(checks).await.into_iter().flatten());
    let checked = probes.len();
    if failures.is_empty() && checked > 0 {
        (StatusCode::OK, json!({"status": "ok", "workers_checked": checked}))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "unhealthy", "workers_checked": checked, "failures": failures}),
        )
    }
}

/// `GET /v1/models/{id}`: the model as `/v1/models` lists it, or 404.
///
/// # Errors
/// 404 `model_not_found` for a model no worker serves.
pub fn model(up: &Upstreams, id: &str) -> Result<Value, ProxyError> {
    let model = ModelName::new(id);
    if !up.link.targets().serves(&model) {
        return Err(ProxyError::UnknownModel(model));
    }
    Ok(model_object(&model))
}

/// A model as OpenAI's `/v1/models` describes one.
pub fn model_object(model: &ModelName) -> Value {
    json!({"id": model.as_str(), "object": "model", "created": 0, "owned_by": "infera"})
}

/// The body's `model`, when it names one.
///
/// # Errors
/// 400 for a body that is not a JSON object or a `model` that is not a non-empty string.
pub fn model_of_body(body: &[u8]) -> Result<Option<ModelName>, ProxyError> {
    let value: Value = serde_json::from_slice(body).map_err(ProxyError::BadJson)?;
    let Value::Object(map) = value else {
        return Err(ProxyError::BadRequest("request body must be a JSON object"));
    };
    match map.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(m)) if !m.trim().is_empty() => Ok(Some(ModelName::new(m.as_str()))),
        Some(_) => Err(ProxyError::BadRequest("model must be a non-empty string")),
    }
}

/// `?model=NAME` of a query string, percent-decoded.
pub fn model_of_query(query: Option<&str>) -> Option<ModelName> {
    let value = query?.split('&').find_map(|pair| pair.strip_prefix("model="))?;
    let value = value.replace('+', " ");
    let decoded = percent_encoding::percent_decode_str(&value).decode_utf8().ok()?;
    (!decoded.trim().is_empty()).then(|| ModelName::new(decoded.as_ref()))
}

fn model_or_only(up: &Upstreams, model: Option<ModelName>) -> Result<ModelName, ProxyError> {
    let list = up.link.targets();
    match list.model_for(model.as_ref()) {
        Some(m) if list.serves(&m) => Ok(m),
        Some(m) => Err(ProxyError::UnknownModel(m)),
        None => Err(ProxyError::BadRequest("model is required: the deployment serves several models")),
    }
}

fn request(asked: &Asked<'_>, method: Method, url: &str, body: &Bytes) -> Request<Full<Bytes>> {
    let mut req = Request::builder().method(method).uri(url);
    if !body.is_empty() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    if let Some(auth) = asked.authorization {
        req = req.header(header::AUTHORIZATION, auth.clone());
    }
    if let Ok(id) = header::HeaderValue::from_str(asked.request_id.as_str()) {
        req = req.header("x-request-id", id);
    }
    req.body(Full::new(body.clone())).expect("a valid request")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routes_and_their_aliases_are_known() {
        assert_eq!(Info::of(&Method::POST, "/v1/tokenize"), Some(Info::Tokenize));
        assert_eq!(Info::of(&Method::POST, "/tokenize"), Some(Info::Tokenize));
        assert_eq!(Info::of(&Method::POST, "/detokenize"), Some(Info::Detokenize));
        assert_eq!(Info::of(&Method::GET, "/model_info"), Some(Info::ModelInfo));
        assert_eq!(Info::of(&Method::GET, "/get_server_info"), Some(Info::ServerInfo));
        assert_eq!(Info::of(&Method::GET, "/v1/tokenize"), None, "tokenize is a POST");
        assert_eq!(Info::of(&Method::POST, "/get_model_info"), None);
        let count = Info::of(&Method::POST, "/v1/messages/count_tokens");
        assert_eq!(
            count.map(|i| (i.worker_path(), i.envelope())),
            Some(("/v1/messages/count_tokens", crate::envelope::Envelope::Anthropic))
        );
    }

    #[test]
    fn the_model_is_read_from_the_query_and_the_body() {
        let m = |s: &str| Some(ModelName::new(s));
        assert_eq!(model_of_query(Some("model=m")), m("m"));
        assert_eq!(model_of_query(Some("x=1&model=org%2Fname+v2")), m("org/name v2"));
        assert_eq!(model_of_query(Some("model=")), None);
        assert_eq!(model_of_query(None), None);
        assert_eq!(model_of_body(br#"{"model":"m","prompt":"x"}"#).unwrap(), m("m"));
        assert_eq!(model_of_body(br#"{"prompt":"x"}"#).unwrap(), None);
        assert!(matches!(model_of_body(b"[1]"), Err(ProxyError::BadRequest(_))));
        assert!(matches!(model_of_body(br#"{"model":3}"#), Err(ProxyError::BadRequest(_))));
        assert!(matches!(model_of_body(b"{"), Err(ProxyError::BadJson(_))));
    }
}

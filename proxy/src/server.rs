//! The HTTP front: accept connections, route by path, and run one generation request through
//! its steps — read → facts → route → dispatch (retries on a fresh pick before the first
//! byte) → relay.

use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use infera_proto::types::Api;
use infera_runtime::serve::{Drain, Listening, Plain, serve_http};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::net::TcpListener;
use tracing::Instrument;

use crate::access::{self, Access, Relaying, Trail};
use crate::admission::Admission;
use crate::any_worker;
use crate::body::{Body, full};
use crate::config::Config;
use crate::envelope::Envelope;
use crate::error::ProxyError;
use crate::facts;
use crate::forward::Dispatched;
use crate::keys;
use crate::prompt_logprobs::Merged;
use crate::relay::{Relay, Relayed, Started};
use crate::request_body;
use crate::retry;
use crate::tokens;
use crate::upstream::Upstreams;

/// What every request handler shares.
#[derive(Debug)]
pub struct Ctx {
    /// Workers, control, metrics.
    pub up: Upstreams,
    /// For `/metrics`.
    pub registry: Registry,
    /// The proxy's configuration (body and time limits, the tokenizer).
    pub config: Config,
    /// The in-flight limit and its queue.
    pub admission: Admission,
    /// The client listener's connection gauges.
    pub connections: crate::metrics::ConnectionMetrics,
    /// What every request body held now may add up to (`--max-body-bytes-in-flight`).
    pub body_budget: crate::request_body::BodyBudget,
    /// Whether each worker renders chat prompts as this proxy does.
    pub parity: Arc<crate::parity::Parity>,
}

/// Where the proxy serves: the API, and `/metrics` apart (`--metrics-listen`) or not.
#[derive(Debug)]
pub struct Listeners {
    /// The API (and `/health`; `/metrics` too without `metrics`).
    pub api: TcpListener,
    /// `/metrics` alone, plain HTTP.
    pub metrics: Option<TcpListener>,
}

/// Serves the API on `api` until `stop` resolves, then lets open connections finish (streams end
/// on their own: the drain is unbounded), on the accept loop every infera server shares (behind
/// TLS with `--tls-cert`), held to the configured connection limits through `listening`.
pub async fn serve(
    ctx: Arc<Ctx>,
    api: TcpListener,
    listening: Listening,
    stop: impl std::future::Future<Output = ()>,
) {
    let tls = ctx.config.tls.listener.clone();
    let handler = move |req| handle(ctx.clone(), req);
    match tls {
        Some(tls) => serve_http(api, tls, handler, stop, Drain::Unbounded, listening).await,
        None => serve_http(api, Plain, handler, stop, Drain::Unbounded, listening).await,
    }
}

/// Serves `/metrics` alone on `listener` (`--metrics-listen`) until `stop`.
pub async fn serve_metrics(
    ctx: Arc<Ctx>,
    listener: TcpListener,
    stop: impl std::future::Future<Output = ()>,
) {
    let handler = move |req: Request<Incoming>| {
        let ctx = ctx.clone();
        async move {
            match (req.method(), req.uri().path()) {
                (&Method::GET, "/metrics") => metrics(&ctx),
                (method, path) => {
                    let e = ProxyError::NoRoute { method: method.clone(), path: path.to_owned() };
                    e.into_response(&facts::new_request_id())
                }
            }
        }
    };
    let listening = Listening::new(infera_runtime::serve::ConnLimits::DEFAULT);
    serve_http(listener, Plain, handler, stop, Drain::For(std::time::Duration::from_secs(5)), listening)
        .await;
}

async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Response<Body> {
    if let Some(info) = any_worker::Info::of(req.method(), req.uri().path()) {
        let resp = any_worker(&ctx, info, req).await;
        ctx.up.metrics.answered(info.label(), &Arc::from(""), resp.status().as_u16());
        return resp;
    }
    let api = match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/chat/completions") => Api::ChatCompletions,
        (&Method::POST, "/v1/completions") => Api::Completions,
        (&Method::POST, "/generate") => Api::Generate,
        (&Method::POST, "/v1/responses") => Api::Responses,
        (&Method::POST, "/v1/messages") => Api::Messages,
        (&Method::POST, "/v1/embeddings") => Api::Embeddings,
        // SGLang takes PUT too.
        (&Method::POST | &Method::PUT, "/v1/rerank") => Api::Rerank,
        (&Method::POST, "/v1/classify") => Api::Classify,
        (&Method::GET, "/v1/models") => {
            if let Err(e) = identify(&ctx, req.headers()) {
                return e.into_response(&facts::new_request_id());
            }
            return models(&ctx);
        }
        (&Method::GET, path) if path.starts_with("/v1/models/") => {
            let id = &path["/v1/models/".len()..];
            let request_id = facts::new_request_id();
            return match identify(&ctx, req.headers()).and_then(|_| any_worker::model(&ctx.up, id)) {
                Ok(model) => json_response(StatusCode::OK, model),
                Err(e) => e.into_response(&request_id),
            };
        }
        (&Method::GET, "/health_generate") => {
            let request_id = facts::client_request_id(req.headers()).unwrap_or_else(facts::new_request_id);
            let asked = any_worker::Asked {
                up: &ctx.up,
                request_id: &request_id,
                authorization: None,
                timeout: ctx.config.request_timeout,
            };
            let model = any_worker::model_of_query(req.uri().query());
            let (status, answer) = any_worker::health_generate(&asked, model).await;
            let resp = json_response(status, answer);
            ctx.up.metrics.answered("health_generate", &Arc::from(""), resp.status().as_u16());
            return resp;
        }
        (&Method::GET, "/health" | "/liveness") => return text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readiness") => return readiness(&ctx),
        (&Method::GET, "/metrics") if ctx.config.connections.metrics_listen.is_none() => {
            return metrics(&ctx);
        }
        (method, path) => {
            let e = ProxyError::NoRoute { method: method.clone(), path: path.to_owned() };
            return e.into_response(&facts::new_request_id());
        }
    };
    let started = Started { at: Instant::now(), inflight: ctx.up.metrics.request_started(), admitted: None };
    let span = tracing::info_span!(
        "request",
        otel.name = api.path(),
        request_id = tracing::field::Empty,
        api_key = tracing::field::Empty
    );
    infera_runtime::telemetry::set_parent(
        &span,
        infera_runtime::telemetry::context_from_headers(req.headers()),
    );
    let mut trail = Trail::new(started.at, ctx.config.access_log);
    let resp = match generate(&ctx, api, req, started, &mut trail).instrument(span).await {
        Ok(resp) => resp,
        Err((e, request_id)) => e.respond(Envelope::of(api), &request_id),
    };
    ctx.up.metrics.answered(api.as_str(), &trail.model, resp.status().as_u16());
    ctx.up.metrics.classes.answered(trail.class.as_ref(), resp.status().as_u16());
    if resp.extensions().get::<Relaying>().is_none() {
        // Answered without a worker's answer: its access line now (a relayed one writes its own
        // at its end), under the id the client was given.
        let given = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok());
        if let Some(id) = given {
            trail.request_id = Some(infera_proto::types::RequestId::new(id));
        }
        trail.refused(api, resp.status(), &ctx.up.metrics);
    }
    resp
}

/// A request any worker of the model answers ([`any_worker`]): the caller identified, its body
/// read within the proxy's limits, then sent on.
async fn any_worker(ctx: &Ctx, info: any_worker::Info, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let request_id = facts::client_request_id(&parts.headers).unwrap_or_else(facts::new_request_id);
    if let Err(e) = identify(ctx, &parts.headers) {
        return e.respond(info.envelope(), &request_id);
    }
    let (bytes, _hold) = match read_body(ctx, body, &parts.headers).await {
        Ok(b) => b,
        Err(e) => return e.respond(info.envelope(), &request_id),
    };
    let model = if parts.method == Method::POST {
        match crate::bounds::check_values(&bytes, ctx.config.max_body_values)
            .and_then(|()| any_worker::model_of_body(&bytes))
        {
            Ok(m) => m,
            Err(e) => return e.respond(info.envelope(), &request_id),
        }
    } else {
        any_worker::model_of_query(parts.uri.query())
    };
    let asked = any_worker::Asked {
        up: &ctx.up,
        request_id: &request_id,
        authorization: parts.headers.get(header::AUTHORIZATION).filter(|_| ctx.config.forward_authorization),
        timeout: ctx.config.request_timeout,
    };
    match any_worker::forward(&asked, info, model, bytes).await {
        Ok(mut resp) => {
            for h in [header::CONNECTION, header::TRANSFER_ENCODING] {
                resp.headers_mut().remove(h);
            }
            if let Ok(v) = header::HeaderValue::from_str(request_id.as_str()) {
                resp.headers_mut().insert("x-request-id", v);
            }
            resp
        }
        Err(e) => e.respond(info.envelope(), &request_id),
    }
}

/// A request's body, read whole within `--max-body-bytes`, the bytes in flight and
/// `--body-read-timeout-ms`; held against the budget while the hold lives.
async fn read_body(
    ctx: &Ctx,
    body: Incoming,
    headers: &http::HeaderMap,
) -> Result<(bytes::Bytes, request_body::BodyHold), ProxyError> {
    let limit = ctx.config.max_body_bytes;
    let read = request_body::read_body(body, limit, headers, &ctx.body_budget, &ctx.up.metrics);
    let timeout = ctx.config.connections.body_read_timeout;
    tokio::time::timeout(timeout, read).await.map_err(|_| ProxyError::BodyTimeout(timeout))?
}

/// The key of a request, with `--api-keys` (`None` without): its name goes into the span and
/// the metrics, never the key.
fn identify(ctx: &Ctx, headers: &http::HeaderMap) -> Result<Option<keys::Caller>, ProxyError> {
    let Some(keys) = &ctx.config.api_keys else { return Ok(None) };
    match keys.get().identify_request(headers) {
        Ok(caller) => {
            tracing::Span::current().record("api_key", tracing::field::debug(&*caller.name));
            Ok(Some(caller))
        }
        Err(_) => {
            ctx.up.metrics.unauthorized();
            Err(ProxyError::Unauthorized)
        }
    }
}

/// Charges the caller's tokens-per-second limit with the request's prompt tokens.
fn charge(ctx: &Ctx, caller: Option<&keys::Caller>, tokens: u64) -> Result<(), ProxyError> {
    let (Some(keys), Some(caller)) = (&ctx.config.api_keys, caller) else { return Ok(()) };
    match keys.get().charge(caller, tokens, Instant::now()) {
        Ok(()) => {
            ctx.up.metrics.key_request(&caller.name, "ok");
            Ok(())
        }
        Err(keys::Refusal::RateLimited { name, retry_after }) => {
            ctx.up.metrics.key_request(&name, "rate_limited");
            Err(ProxyError::RateLimited { key: name, retry_after })
        }
        Err(keys::Refusal::Unauthorized) => Err(ProxyError::Unauthorized),
    }
}

/// A request the proxy answers itself: the error, and the request id the client is given.
type Refused = (ProxyError, infera_proto::types::RequestId);

/// One generation request, start to relay; or the error that ended it first, which the caller
/// renders in `api`'s envelope.
async fn generate(
    ctx: &Ctx,
    api: Api,
    req: Request<Incoming>,
    mut started: Started,
    trail: &mut Trail,
) -> Result<Response<Body>, Refused> {
    let (parts, body) = req.into_parts();
    let header_id = facts::client_request_id(&parts.headers);
    trail.request_id = header_id.clone();
    let caller = match identify(ctx, &parts.headers) {
        Ok(c) => c,
        Err(e) => return Err((e, header_id.unwrap_or_else(facts::new_request_id))),
    };
    trail.key = caller.as_ref().map(|c| c.name.clone());
    // A place in flight first: a queued request holds nothing but its connection.
    let admitted = match ctx.admission.admit(&ctx.up.metrics).await {
        Ok(a) => a,
        Err(e) => return Err((e, header_id.unwrap_or_else(facts::new_request_id))),
    };
    let deadline = admitted.deadline;
    started.admitted = Some(admitted);
    // The body's share of --max-body-bytes-in-flight lasts as long as this request is served.
    let (bytes, _body_hold) = match read_body(ctx, body, &parts.headers).await {
        Ok(b) => b,
        Err(e) => return Err((e, header_id.unwrap_or_else(facts::new_request_id))),
    };
    if let Err(e) = crate::bounds::check_values(&bytes, ctx.config.max_body_values) {
        return Err((e, header_id.unwrap_or_else(facts::new_request_id)));
    }
    let facts = match facts::derive(api, &parts.headers, &bytes) {
        Ok(f) => facts::Facts {
            tenant: caller.as_ref().map(keys::Caller::tenant),
            admission: facts::with_caller(f.admission, caller.as_ref()),
            ..f
        },
        Err(e) => return Err((e, header_id.unwrap_or_else(facts::new_request_id))),
    };
    let targets = ctx.up.link.targets();
    // The base model of a LoRA adapter (`base:adapter`) serves it, with its tokenizer.
    let (model, facts) = facts.served_by(&targets);
    trail.model = access::model_label(&targets, model.as_ref());
    let tokenizer = model.as_ref().and_then(|m| ctx.config.tokenizers.get(m));
    let mut facts =
        tokens::attach(facts, bytes.len(), tokenizer.as_ref(), &trail.model, &ctx.up.metrics).await;
    ctx.parity.guard(&mut facts, &targets);
    trail.request_id = Some(facts.request_id.clone());
    trail.input_tokens = facts.input_tokens;
    trail.class = facts.admission.class.as_ref().map(|c| Arc::from(c.as_str()));
    tracing::Span::current().record("request_id", tracing::field::debug(facts.request_id.as_str()));
    if let Err(e) = charge(ctx, caller.as_ref(), facts.input_tokens) {
        return Err((e, facts.request_id.clone()));
    }
    let mut headers = parts.headers;
    if !ctx.config.forward_authorization {
        headers.remove(header::AUTHORIZATION);
    }
    if let Ok(v) = header::HeaderValue::from_str(facts.request_id.as_str()) {
        headers.insert("x-request-id", v);
    }
    let timeout = ctx.config.request_timeout;
    let retries = retry::Retries {
        max: ctx.config.retries,
        backoff: ctx.config.retry_backoff,
        attempt_timeout: ctx.config.attempt_timeout,
    };
    let attempt = retry::send(&ctx.up, retries, &facts, &headers, deadline);
    let Dispatched { response, first, mut legs } = match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return Err((e, facts.request_id.clone())),
        Err(_) => return Err((ProxyError::Timeout(timeout), facts.request_id.clone())),
    };
    let (mut head, body) = response.into_parts();
    for h in [header::CONNECTION, header::TRANSFER_ENCODING, http::HeaderName::from_static("keep-alive")] {
        head.headers.remove(h);
    }
    if let Ok(v) = header::HeaderValue::from_str(facts.request_id.as_str()) {
        head.headers.insert("x-request-id", v);
    }
    let access = Access {
        prefill: legs.prefill_target(),
        decode: legs.decode().map(crate::targets::Endpoint::target),
        ..trail.access(api, head.status)
    };
    head.extensions.insert(Relaying);
    let prompt_logprobs = legs.take_prompt_logprobs();
    if prompt_logprobs.is_some() {
        // The merged answer is longer than the decode's.
        head.headers.remove(header::CONTENT_LENGTH);
    }
    let relayed = Relayed { up: ctx.up.clone(), legs, api, access, stream: facts.stream, started };
    let relay = Relay::new(body, relayed)
        .with_length(
            head.headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        )
        .with_first(first)
        .with_idle_timeout(ctx.config.stream_idle_timeout.filter(|_| facts.stream));
    Ok(match prompt_logprobs {
        Some(rx) => Response::from_parts(head, Merged::new(relay, rx, facts.stream).boxed()),
        None => Response::from_parts(head, relay.boxed()),
    })
}

fn models(ctx: &Ctx) -> Response<Body> {
    let data: Vec<_> =
        ctx.up.link.targets().models().into_iter().map(|id| any_worker::model_object(&id)).collect();
    json_response(StatusCode::OK, json!({"object": "list", "data": data}))
}

fn readiness(ctx: &Ctx) -> Response<Body> {
    let link = &ctx.up.link;
    let ready = link.lease().is_some() || !link.targets().is_empty();
    if ready {
        text(StatusCode::OK, "ready\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "control not reached yet\n")
    }
}

fn metrics(ctx: &Ctx) -> Response<Body> {
    ctx.up.metrics.lease_held(ctx.up.link.lease().is_some());
    ctx.connections.refresh();
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &ctx.registry) {
        Ok(()) => {
            let mut r = Response::new(full(out));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut r = Response::new(full(body.to_owned()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    r
}

fn json_response(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r
}

//! The generation handler: body → [`GenRequest`](super::input::GenRequest) → SGLang's checks →
//! [`flow::start`] → SSE stream or one JSON body. A stream's body owns the flow's receiver: when
//! the client goes away hyper drops the body, the flow sees its channel closed and aborts the
//! request. A request with `n > 1` runs as `n` requests, as SGLang expands it, answered
//! together (not streamed).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use infera_proto::types::Api;
use serde_json::{Value, json};

use super::input::{self, GenRequest, InputError};
use super::render::{Render, RenderOptions, unix_secs};
use crate::app::App;
use crate::error::ApiError;
use crate::flow::{self, FlowEvent, Run};
use crate::server::{self, Body};

/// Largest request body read.
const BODY_LIMIT: usize = 64 << 20;

/// Serves one data-plane request.
pub(super) async fn handle(app: Arc<App>, route: Api, req: Request<Incoming>) -> Response<Body> {
    let headers = req.headers().clone();
    let body = match server::read_body(req, BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return ApiError::Input(InputError::Body(e)).response(route),
    };
    let body = if route == Api::Messages {
        match super::messages::prepare(&body, &app.config.sglang_version) {
            Ok(b) => bytes::Bytes::from(b),
            Err(e) => return ApiError::Input(e).response(route),
        }
    } else {
        body
    };
    let request = match input::parse(route, &headers, &body, app.config.tokenizer.as_deref()) {
        Ok(r) => r,
        Err(e) => return ApiError::Input(e).response(route),
    };
    if !app.config.generates() {
        return ApiError::NotGenerative.response(route);
    }
    // SGLang's checks before admission: the sampling parameters, then the lengths.
    let checked = request
        .sampling
        .verify()
        .and_then(|()| request.sampling.check_length(request.prompt.len(), app.config.context_length));
    if let Err(message) = checked {
        return ApiError::Input(InputError::Invalid(message)).response(route);
    }
    let options = RenderOptions {
        include_usage: request.include_usage,
        cache_report: app.config.cache_report,
        logprobs: request.sampling.logprobs,
        ranks: app.config.ranks,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        index: 0,
    };
    let model = request.model.clone().unwrap_or_else(|| app.config.served_model_name.clone());
    let created = unix_secs();
    if request.sampling.n > 1 && !request.stream {
        return several(&app, route, request, model, options, created).await;
    }
    let stream = request.stream;
    let run = match flow::start(&app, route, request) {
        Ok(run) => run,
        Err(e) => return e.response(route),
    };
    let render = Render::new(route, &run, model, options, app.seed, created);
    if stream { streamed(run, render) } else { respond(whole(run, render).await) }
}

fn streamed(run: Run, render: Render) -> Response<Body> {
    let events = futures_util::stream::unfold(Some((run.events, render)), |state| async move {
        let (mut rx, mut render) = state?;
        let chunk = match rx.recv().await? {
            FlowEvent::Tokens { tokens, cached } => {
                let chunk = render.tokens(tokens, cached);
                return Some((Ok(chunk), Some((rx, render))));
            }
            FlowEvent::Done { tokens, cached, finish } => Ok(render.done(tokens, cached, &finish)),
            FlowEvent::Failed(e) => Ok(render.failed(&e)),
            FlowEvent::Died => {
                // Let hyper flush what was already sent before the connection breaks.
                tokio::task::yield_now().await;
                Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "die fault"))
            }
        };
        Some((chunk, None))
    });
    server::sse(events)
}

/// The whole body, or the response that ends the request otherwise (a failure, a broken
/// connection).
async fn whole(mut run: Run, mut render: Render) -> Result<Value, Response<Body>> {
    while let Some(event) = run.events.recv().await {
        match event {
            FlowEvent::Tokens { .. } => {}
            FlowEvent::Done { tokens, cached, finish } => {
                return Ok(render.whole(tokens, cached, &finish));
            }
            FlowEvent::Failed(e) => return Err(e.response(render.route)),
            FlowEvent::Died => return Err(server::broken(StatusCode::OK)),
        }
    }
    Err(server::broken(StatusCode::OK))
}

/// `n > 1`: `n` requests (each its own id on `/generate`, one id on the OpenAI routes); the
/// bodies of `/generate` as a list, the OpenAI choices merged into the first body with their
/// indices and the usage summed (the prompt counted once).
async fn several(
    app: &Arc<App>,
    route: Api,
    request: GenRequest,
    model: String,
    options: RenderOptions,
    created: u64,
) -> Response<Body> {
    let n = request.sampling.n;
    let mut runs = Vec::new();
    for i in 0..n {
        let mut one = request.clone();
        one.rid = request.rid.as_ref().map(|rid| if i == 0 { rid.clone() } else { format!("{rid}-{i}") });
        match flow::start(app, route, one) {
            Ok(run) => runs.push(run),
            Err(e) => return e.response(route),
        }
    }
    let first_rid = runs.first().map(|r| r.rid.clone()).unwrap_or_default();
    let mut bodies = Vec::new();
    for (i, run) in (0u32..).zip(runs) {
        let mut render = Render::new(
            route,
            &run,
            model.clone(),
            RenderOptions { index: i, ..options.clone() },
            app.seed,
            created,
        );
        if route.is_openai() {
            render.rid.clone_from(&first_rid);
        }
        match whole(run, render).await {
            Ok(body) => bodies.push(body),
            Err(response) => return response,
        }
    }
    server::json(StatusCode::OK, &merge(route, bodies))
}

/// The `n` answers as one.
fn merge(route: Api, bodies: Vec<Value>) -> Value {
    if !route.is_openai() || route == Api::Responses {
        return Value::Array(bodies);
    }
    let mut iter = bodies.into_iter();
    let Some(mut first) = iter.next() else { return Value::Null };
    for body in iter {
        if let (Some(choices), Some(more)) = (first["choices"].as_array_mut(), body["choices"].as_array()) {
            choices.extend(more.iter().cloned());
        }
        let (total, completion) = (&first["usage"]["total_tokens"], &first["usage"]["completion_tokens"]);
        let add = body["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        let (total, completion) = (total.as_u64().unwrap_or(0) + add, completion.as_u64().unwrap_or(0) + add);
        first["usage"]["total_tokens"] = json!(total);
        first["usage"]["completion_tokens"] = json!(completion);
    }
    first
}

/// A whole body as a 200, or the response that replaced it.
fn respond(result: Result<Value, Response<Body>>) -> Response<Body> {
    match result {
        Ok(body) => server::json(StatusCode::OK, &body),
        Err(response) => response,
    }
}

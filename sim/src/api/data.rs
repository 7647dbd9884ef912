//! The data-plane handler: body → [`GenRequest`](super::input::GenRequest) → [`flow::start`] →
//! SSE stream or one JSON body. A stream's body owns the flow's receiver: when the client goes
//! away hyper drops the body, the flow sees its channel closed and aborts the request.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use infera_proto::types::Api;

use super::input::{self, InputError};
use super::render::{Finish, Render};
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
    let request = match input::parse(route, &headers, &body, app.config.tokenizer.as_deref()) {
        Ok(r) => r,
        Err(e) => return ApiError::Input(e).response(route),
    };
    let (stream, include_usage) = (request.stream, request.include_usage);
    let model = request.model.clone().unwrap_or_else(|| app.config.served_model_name.clone());
    let run = match flow::start(&app, route, request) {
        Ok(run) => run,
        Err(e) => return e.response(route),
    };
    let mut render = Render::new(route, &run, model, include_usage, app.seed, app.created);
    render.cache_report = app.config.cache_report;
    if stream { streamed(run, render) } else { whole(run, render).await }
}

fn streamed(run: Run, render: Render) -> Response<Body> {
    let events = futures_util::stream::unfold(Some((run.events, render)), |state| async move {
        let (mut rx, mut render) = state?;
        let chunk = match rx.recv().await? {
            FlowEvent::Tokens { tokens, cached } => {
                let chunk = render.tokens(tokens, cached);
                return Some((Ok(chunk), Some((rx, render))));
            }
            FlowEvent::Done { tokens, cached, aborted } => Ok(render.done(tokens, cached, finish(aborted))),
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

async fn whole(mut run: Run, mut render: Render) -> Response<Body> {
    while let Some(event) = run.events.recv().await {
        match event {
            FlowEvent::Tokens { .. } => {}
            FlowEvent::Done { tokens, cached, aborted } => {
                return server::json(StatusCode::OK, &render.whole(tokens, cached, finish(aborted)));
            }
            FlowEvent::Failed(e) => return e.response(render.route),
            FlowEvent::Died => return server::broken(StatusCode::OK),
        }
    }
    server::broken(StatusCode::OK)
}

fn finish(aborted: bool) -> Finish {
    if aborted { Finish::Abort } else { Finish::Length }
}

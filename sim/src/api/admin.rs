//! Operator and test endpoints: `/flush_cache`, `/abort_request`, and the emulator's own
//! `/sim/requests` (the request log) and `/sim/faults` (fault knobs at run time).

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use crate::app::App;
use crate::faults::FaultsUpdate;
use crate::server::{self, Body};

/// Largest admin body read.
const BODY_LIMIT: usize = 1 << 20;

/// `GET|POST /flush_cache`: empties every rank's prefix cache.
pub(super) fn flush_cache(app: &App) -> Response<Body> {
    app.engine.flush_cache();
    tracing::info!("prefix cache flushed");
    // SGLang answers with a plain Starlette `Response`: no content-type.
    server::untyped(
        StatusCode::OK,
        "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
    )
}

#[derive(Debug, Deserialize)]
struct AbortRequest {
    #[serde(default)]
    rid: Option<String>,
    #[serde(default)]
    abort_all: bool,
}

/// `POST /abort_request {"rid", "abort_all"}`.
pub(super) async fn abort_request(app: &App, req: Request<Incoming>) -> Response<Body> {
    let body = match server::read_body(req, BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return bad_request(e.to_string()),
    };
    let abort: AbortRequest = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => return bad_request(format!("invalid abort request: {e}")),
    };
    let aborted = match (abort.abort_all, abort.rid) {
        (true, _) => app.engine.abort_all(),
        (false, Some(rid)) => usize::from(app.engine.abort_rid(&rid)),
        (false, None) => 0,
    };
    tracing::info!(aborted, "abort_request");
    server::empty(StatusCode::OK)
}

/// `GET /sim/requests`: the request log, oldest first.
pub(super) fn requests(app: &App) -> Response<Body> {
    server::json(StatusCode::OK, &serde_json::to_value(app.log.entries()).unwrap_or_default())
}

/// `GET /sim/faults` reads the knobs; `POST` changes them (absent keys unchanged, `null` clears).
pub(super) async fn faults(app: &App, req: Request<Incoming>) -> Response<Body> {
    if req.method() == Method::POST {
        let body = match server::read_body(req, BODY_LIMIT).await {
            Ok(b) => b,
            Err(e) => return bad_request(e.to_string()),
        };
        match serde_json::from_slice::<FaultsUpdate>(&body) {
            Ok(update) => {
                let now = app.faults.update(update);
                app.engine.set_hung(now.hang);
                tracing::info!(?now, "fault knobs changed");
            }
            Err(e) => return bad_request(format!("invalid faults: {e}")),
        }
    }
    server::json(StatusCode::OK, &serde_json::to_value(app.faults.get()).unwrap_or_default())
}

fn bad_request(message: String) -> Response<Body> {
    server::json(StatusCode::BAD_REQUEST, &json!({ "error": { "message": message } }))
}

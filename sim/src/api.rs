//! The SGLang HTTP API on `--host:--port`: routes → handlers.
//!
//! | route | handler |
//! |---|---|
//! | `GET /health`, `/health_generate`, `/ready` | empty 200 (503 once shutting down) |
//! | `GET /server_info`, `/get_server_info`, `/model_info`, `/get_model_info`, `/v1/models`, `/v1/loads` | `info` |
//! | `GET\|POST /flush_cache`, `POST /abort_request`, `GET /sim/requests`, `GET\|POST /sim/faults` | `admin` |
//! | `POST /generate` (also `PUT`), `/v1/chat/completions`, `/v1/completions`, `/v1/responses`, `/v1/messages` | `data` |
//! | `POST /v1/messages/count_tokens` | `messages` |
//! | `POST /v1/embeddings`, `/v1/classify`, `/v1/rerank` (also `PUT`) | `pooling` |
//! | `POST /v1/tokenize`, `/tokenize`, `/v1/detokenize`, `/detokenize` | `tokenize` |

mod admin;
mod data;
pub(crate) mod info;
pub mod input;
mod messages;
mod pooling;
pub mod render;
mod tokenize;

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use infera_proto::types::Api;

use crate::app::App;
use crate::server::{self, Body};

/// Routes one API request.
pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/health" | "/health_generate" | "/ready") => {
            server::empty(if app.serving() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE })
        }
        (&Method::GET, "/server_info" | "/get_server_info") => {
            server::json(StatusCode::OK, &info::server_info(&app))
        }
        (&Method::GET, "/model_info" | "/get_model_info") => {
            server::json(StatusCode::OK, &info::model_info(&app))
        }
        (&Method::GET, "/v1/models") => server::json(StatusCode::OK, &info::models(&app)),
        (&Method::GET, p) if p.starts_with("/v1/models/") => {
            let (status, body) = info::model(&app, &p["/v1/models/".len()..]);
            server::json(status, &body)
        }
        (&Method::GET, "/v1/loads") => info::loads(&app, req.uri().query().unwrap_or("")),
        (&Method::GET | &Method::POST, "/flush_cache") => admin::flush_cache(&app),
        (&Method::POST, "/abort_request") => admin::abort_request(&app, req).await,
        (&Method::GET, "/sim/requests") => admin::requests(&app),
        (&Method::GET | &Method::POST, "/sim/faults") => admin::faults(&app, req).await,
        // SGLang also takes `PUT /generate` and `PUT /v1/rerank`.
        (&Method::PUT, "/generate") => data::handle(app, Api::Generate, req).await,
        (&Method::PUT, "/v1/rerank") => pooling::handle(app, Api::Rerank, req).await,
        (&Method::POST, "/v1/tokenize" | "/tokenize") => tokenize::tokenize(&app, req).await,
        (&Method::POST, "/v1/detokenize" | "/detokenize") => tokenize::detokenize(&app, req).await,
        (&Method::POST, "/v1/messages/count_tokens") => messages::count_tokens(&app, req).await,
        (&Method::POST, _) if Api::from_path(&path).is_some() => match Api::from_path(&path) {
            Some(route) if route.generates() => data::handle(app, route, req).await,
            Some(route) => pooling::handle(app, route, req).await,
            None => not_found(),
        },
        // A known path with another method: Starlette's 405.
        (_, p) if known_path(p) => server::json(
            StatusCode::METHOD_NOT_ALLOWED,
            &serde_json::json!({ "detail": "Method Not Allowed" }),
        ),
        _ => not_found(),
    }
}

/// Paths the SGLang API serves (with some method): these, and every [`Api`]'s.
fn known_path(path: &str) -> bool {
    const PATHS: [&str; 18] = [
        "/health",
        "/health_generate",
        "/ready",
        "/server_info",
        "/get_server_info",
        "/model_info",
        "/get_model_info",
        "/v1/models",
        "/v1/loads",
        "/flush_cache",
        "/abort_request",
        "/sim/requests",
        "/sim/faults",
        "/v1/tokenize",
        "/tokenize",
        "/v1/detokenize",
        "/detokenize",
        "/v1/messages/count_tokens",
    ];
    PATHS.contains(&path) || Api::from_path(path).is_some()
}

fn not_found() -> Response<Body> {
    server::json(StatusCode::NOT_FOUND, &serde_json::json!({ "detail": "Not Found" }))
}

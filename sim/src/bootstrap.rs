//! The prefill's bootstrap listener (`--disaggregation-bootstrap-port`): `GET /health` → `OK`,
//! and the emulator's own rendezvous, `GET /sim/kv/{room}?timeout_ms=T[&dp_rank=R]`, a long
//! poll a decode makes for its room. It answers once the prefill with that room is prefilled
//! and the KV transfer time (`tokens × kv_bytes_per_token / kv_bandwidth`) has elapsed:
//!
//! - `200 {"room", "prompt_tokens", "cached_tokens", "prefill_dp_rank"}`: the KV is there;
//! - `500 {"error"}`: the prefill failed (fault, abort, its own timeout);
//! - `409 {"error"}`: the KV is on another prefill rank than `dp_rank`;
//! - `504 {"error"}`: nothing within `timeout_ms`.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;
use tokio::time::Instant;

use crate::app::App;
use crate::rooms::{KvInfo, Phase};
use crate::server::{self, Body};
use crate::timing;

/// Longest long poll honoured.
const MAX_POLL: Duration = Duration::from_secs(3600);

/// Routes one bootstrap request.
pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    match (req.method(), path.strip_prefix("/sim/kv/")) {
        (&Method::GET, None) if path == "/health" => server::text(StatusCode::OK, "OK"),
        (&Method::GET, Some(room)) => {
            let Ok(room) = room.parse::<u64>() else {
                return error(StatusCode::BAD_REQUEST, format!("bad room {room:?}"));
            };
            let query = req.uri().query().unwrap_or("");
            let timeout =
                param(query, "timeout_ms").map_or(app.config.bootstrap_wait(), Duration::from_millis);
            let expect_rank = param(query, "dp_rank").and_then(|r| u32::try_from(r).ok());
            pull(&app, room, timeout.min(MAX_POLL), expect_rank).await
        }
        _ => server::text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn param(query: &str, key: &str) -> Option<u64> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
}

fn error(status: StatusCode, message: String) -> Response<Body> {
    server::json(status, &json!({ "error": message }))
}

fn ok(info: &KvInfo) -> Response<Body> {
    server::json(StatusCode::OK, &serde_json::to_value(info).unwrap_or_default())
}

/// Resets a pull that did not complete, so another poll can take the KV.
struct PullGuard<'a> {
    app: &'a App,
    room: u64,
    done: bool,
}

impl Drop for PullGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.app.rooms.cancel_pull(self.room);
        }
    }
}

async fn pull(app: &App, room: u64, timeout: Duration, expect_rank: Option<u32>) -> Response<Body> {
    let deadline = Instant::now() + timeout;
    let mut rx = app.rooms.watch(room);
    loop {
        if Instant::now() >= deadline {
            app.rooms.abandon(room);
            let message = format!("bootstrap_room {room}: no prefill within {} ms", timeout.as_millis());
            return error(StatusCode::GATEWAY_TIMEOUT, message);
        }
        let phase = rx.borrow_and_update().clone();
        match phase {
            Phase::Failed(why) => return error(StatusCode::INTERNAL_SERVER_ERROR, why),
            Phase::Transferred(info) => return ok(&info),
            Phase::Prefilled(info) if expect_rank.is_some_and(|r| r != info.prefill_dp_rank) => {
                let message = format!(
                    "bootstrap_room {room} was prefilled on dp rank {}, not disagg_prefill_dp_rank {}",
                    info.prefill_dp_rank,
                    expect_rank.unwrap_or_default()
                );
                return error(StatusCode::CONFLICT, message);
            }
            Phase::Prefilled(_) => {
                if let Some(info) = app.rooms.begin_pull(room) {
                    let mut guard = PullGuard { app, room, done: false };
                    // Our own move to `Pulling` is not news.
                    rx.borrow_and_update();
                    let transfer =
                        app.engine.clock().wall(timing::kv_transfer(&app.config.params, info.prompt_tokens));
                    let transferred = tokio::select! {
                        _ = tokio::time::sleep(transfer) => true,
                        // The prefill failed mid-transfer.
                        _ = rx.changed() => false,
                        _ = tokio::time::sleep_until(deadline) => false,
                    };
                    if transferred && app.rooms.finish_pull(room) {
                        guard.done = true;
                        return ok(&info);
                    }
                    continue;
                }
            }
            Phase::Announced | Phase::Queued | Phase::Pulling(_) => {}
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() {
                return error(StatusCode::INTERNAL_SERVER_ERROR, format!("bootstrap_room {room} vanished"));
            },
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

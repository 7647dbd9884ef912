//! In-process sims on loopback port 0, and requests to them on a connection of their own (the
//! kit's: [`http::send_on_connection`]; an SSE stream read event by event that can hang up
//! mid-stream is the kit's [`Events`]).

// Each test binary uses part of it, the kit's SSE reader too.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use infera_sim::{DisaggregationMode, Listeners, SimConfig};
use infera_testkit::http;
pub use infera_testkit::http::json_request;
use infera_testkit::server::Server;
pub use infera_testkit::sse::{Events, Next, data_of};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running sim.
pub struct Sim {
    pub http: SocketAddr,
    pub bootstrap: Option<SocketAddr>,
    server: Server,
}

impl Sim {
    /// Starts a sim with SGLang flags `flags` (plus `--model-path m --sim-seed 7`), exactly as
    /// the binary would parse them: these tests are about the sim's own command line, so they
    /// give it raw flags rather than the test kit's typed ones.
    pub async fn start(flags: &[&str]) -> Self {
        let mut argv = vec!["infera-sim", "--model-path", "m", "--sim-seed", "7"];
        argv.extend_from_slice(flags);
        let config = SimConfig::from_argv(argv).unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bootstrap = match config.mode {
            DisaggregationMode::Prefill => Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
            _ => None,
        };
        let addr = http.local_addr().unwrap();
        let bootstrap_addr = bootstrap.as_ref().map(|l| l.local_addr().unwrap());
        let listeners = Listeners { http, bootstrap };
        let server = Server::spawn("infera-sim", move |stop| infera_sim::run(listeners, config, stop));
        Self { http: addr, bootstrap: bootstrap_addr, server }
    }

    /// Stops the sim and waits for `run` to return.
    pub async fn stop(mut self) {
        self.server.stop().await.unwrap();
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let (status, body) = get(self.http, path).await;
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let (status, body) = post(self.http, path, body).await.expect("a whole response");
        let value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        (status, value)
    }

    /// `/sim/requests`.
    pub async fn requests(&self) -> Vec<Value> {
        self.get("/sim/requests").await.1.as_array().cloned().unwrap_or_default()
    }

    /// `/v1/loads` entries.
    pub async fn loads(&self) -> Vec<Value> {
        self.get("/v1/loads").await.1["loads"].as_array().cloned().unwrap_or_default()
    }

    /// Sum of a load field over ranks.
    pub async fn load_sum(&self, key: &str) -> u64 {
        self.loads().await.iter().map(|l| l[key].as_u64().unwrap_or(0)).sum()
    }

    /// Sum of a `disaggregation` load field over ranks.
    pub async fn disagg_sum(&self, key: &str) -> u64 {
        self.loads().await.iter().map(|l| l["disaggregation"][key].as_u64().unwrap_or(0)).sum()
    }
}

/// Polls `check` until it holds (bounded, 20 s).
pub async fn eventually(what: &str, check: impl AsyncFnMut() -> bool) {
    infera_testkit::eventually(Duration::from_secs(20), what, check).await;
}

/// One request on its own connection.
pub async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> (Response<Incoming>, JoinHandle<()>) {
    try_send(addr, req).await.unwrap()
}

/// One request on its own connection; `Err` when the connection broke before a response head.
pub async fn try_send(
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
) -> Result<(Response<Incoming>, JoinHandle<()>), hyper::Error> {
    http::send_on_connection(addr, req).await
}

pub async fn get(addr: SocketAddr, path: &str) -> (StatusCode, Bytes) {
    let req = Request::get(path).header("host", "localhost").body(Full::new(Bytes::new())).unwrap();
    let (response, _conn) = send(addr, req).await;
    let status = response.status();
    (status, response.into_body().collect().await.unwrap().to_bytes())
}

/// POSTs JSON; `Err` when the body broke off (die fault).
pub async fn post(addr: SocketAddr, path: &str, body: Value) -> Result<(StatusCode, Bytes), String> {
    let (response, _conn) =
        try_send(addr, json_request(path, &body, &[])).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, body))
}

/// `PUT path` with a JSON body: the status and the body.
pub async fn put(addr: SocketAddr, path: &str, body: Value) -> (StatusCode, Bytes) {
    let mut req = json_request(path, &body, &[]);
    *req.method_mut() = hyper::Method::PUT;
    let (response, _conn) = try_send(addr, req).await.unwrap();
    let status = response.status();
    (status, response.into_body().collect().await.unwrap().to_bytes())
}

//! In-process sims on loopback port 0 and a small HTTP client that can stream SSE events and
//! hang up mid-stream.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use infera_sim::{DisaggregationMode, Listeners, SimConfig};
use infera_testkit::server::Server;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
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
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender.send_request(req).await?;
    Ok((response, conn))
}

pub async fn get(addr: SocketAddr, path: &str) -> (StatusCode, Bytes) {
    let req = Request::get(path).header("host", "sim").body(Full::new(Bytes::new())).unwrap();
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

pub fn json_request(path: &str, body: &Value, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut req = Request::post(path).header("host", "sim").header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// An SSE response being read event by event.
pub struct Events {
    pub status: StatusCode,
    pub content_type: String,
    body: Incoming,
    buf: String,
    conn: JoinHandle<()>,
}

/// What reading the next event gave.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// One event's text (`data: …` lines, `event:` lines kept).
    Event(String),
    /// The body ended cleanly.
    End,
    /// The body broke off.
    Broken,
}

impl Events {
    pub async fn open(addr: SocketAddr, path: &str, body: Value) -> Self {
        Self::open_with(addr, json_request(path, &body, &[])).await
    }

    pub async fn open_with(addr: SocketAddr, req: Request<Full<Bytes>>) -> Self {
        let (response, conn) = send(addr, req).await;
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        Self { status, content_type, body: response.into_body(), buf: String::new(), conn }
    }

    pub async fn next(&mut self) -> Next {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let event = self.buf[..at].to_owned();
                self.buf.drain(..at + 2);
                return Next::Event(event);
            }
            match self.body.frame().await {
                None => return Next::End,
                Some(Err(_)) => return Next::Broken,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.push_str(std::str::from_utf8(&data).unwrap());
                    }
                }
            }
        }
    }

    /// The next `data:` JSON (panics on anything else).
    pub async fn data(&mut self) -> Value {
        match self.next().await {
            Next::Event(e) => data_of(&e).unwrap_or_else(|| panic!("not JSON data: {e:?}")),
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// Every remaining event until the end; `(events, ended cleanly)`.
    pub async fn rest(&mut self) -> (Vec<String>, Next) {
        let mut events = Vec::new();
        loop {
            match self.next().await {
                Next::Event(e) => events.push(e),
                end => return (events, end),
            }
        }
    }

    /// Hangs up (closes the TCP connection).
    pub fn hang_up(self) {
        self.conn.abort();
        drop(self.body);
    }
}

/// The JSON of an event's `data:` line.
pub fn data_of(event: &str) -> Option<Value> {
    event.lines().find_map(|l| l.strip_prefix("data: ")).and_then(|d| serde_json::from_str(d).ok())
}

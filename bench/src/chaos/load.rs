//! The chaos bench's client: a closed loop of `--concurrency` clients sending `--requests` chat
//! completions, streamed or not, through the proxies in turn, as a load balancer in front of them
//! would: a proxy that refuses a connection (nothing was sent) is taken out of rotation and the
//! request sent to the other one; the bench puts a restarted proxy back once it is ready.
//!
//! Every request is drawn from the seed and its index: streamed or not, its length, and whether
//! the client cancels it (drops the connection) after a drawn delay. Every request has the client
//! timeout; one that has not ended by then is dropped and counted as hung. How each one ended:
//!
//! - **ok**: 200 and a complete answer (a stream ends with `data: [DONE]` and no error event);
//! - **clean error**: an error status with an error JSON, or a stream with an error event — by
//!   kind ([`End::Error`]);
//! - **cancelled** by the client, **hung**;
//! - **lost**: the connection broke while the proxy it went to was down (SIGKILLed and not yet
//!   back in rotation) — what a client of a crashed proxy sees;
//! - **broken**: the connection broke, or the answer was cut, with both proxies up.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::deploy::MODEL;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// What to send.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) requests: usize,
    pub(crate) concurrency: usize,
    /// Fewest and most tokens a request asks for.
    pub(crate) tokens: (u32, u32),
    /// The share of requests streamed.
    pub(crate) stream_share: f64,
    /// The share the client cancels, each after a delay drawn up to `cancel_within`.
    pub(crate) cancel_share: f64,
    pub(crate) cancel_within: Duration,
    /// The client timeout of every request.
    pub(crate) timeout: Duration,
    pub(crate) seed: u64,
}

/// One request, as drawn.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) rid: String,
    pub(crate) stream: bool,
    pub(crate) max_tokens: u32,
    pub(crate) cancel_after: Option<Duration>,
    /// The proxy it is sent to first (in turn).
    pub(crate) proxy: usize,
    /// Its index.
    pub(crate) i: usize,
}

impl Plan {
    /// Request `i`, from the seed and `i` alone.
    pub(crate) fn request(&self, i: usize, proxies: usize) -> Request {
        let mut rng = SmallRng::seed_from_u64(self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64);
        let stream = rng.random_bool(self.stream_share);
        let max_tokens = rng.random_range(self.tokens.0..=self.tokens.1);
        let cancel_ms = self.cancel_within.as_millis() as u64;
        let cancel_after = rng
            .random_bool(self.cancel_share)
            .then(|| Duration::from_millis(rng.random_range(0..=cancel_ms)));
        Request { rid: format!("chaos-{i}"), stream, max_tokens, cancel_after, proxy: i % proxies, i }
    }
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Ok,
    /// `kind`: `HTTP <status> <code>` or `SSE <code>`, with the leg of an `upstream_error`, or
    /// `… (engine)` for an error the worker itself put in the stream; `message`: the first one.
    Error {
        kind: String,
        message: String,
        /// Stream events before the error event (0 for an error status).
        chunks: usize,
    },
    Cancelled,
    /// No end within the client timeout; `bytes`: how much of the answer had come.
    Hung {
        bytes: usize,
    },
    Lost,
    Broken(String),
}

/// One request's record.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) request: Request,
    pub(crate) end: End,
    /// Times it was sent to the other proxy after a refused connection.
    pub(crate) resent: u32,
}

/// A proxy's down window: from its kill until it is back in rotation (open while it is down).
type DownWindow = (Instant, Option<Instant>);

/// The client's rotation over the proxies (what a load balancer in front of them keeps).
#[derive(Debug)]
pub(crate) struct Rotation {
    pub(crate) urls: Vec<String>,
    up: Vec<AtomicBool>,
    /// Bumped when a proxy is killed and when it is back: a refusal seen on an older epoch
    /// does not take a proxy that came back out again.
    epoch: Vec<AtomicU64>,
    /// Each proxy's down windows: from its kill until it is back in rotation.
    down: Mutex<Vec<Vec<DownWindow>>>,
}

impl Rotation {
    pub(crate) fn new(urls: Vec<String>) -> Self {
        let n = urls.len();
        Self {
            urls,
            up: (0..n).map(|_| AtomicBool::new(true)).collect(),
            epoch: (0..n).map(|_| AtomicU64::new(0)).collect(),
            down: Mutex::new(vec![Vec::new(); n]),
        }
    }

    /// Proxy `p` was just SIGKILLed (nobody is told: clients find out by refused connections).
    pub(crate) fn killed(&self, p: usize) {
        self.down.lock().expect("rotation lock")[p].push((Instant::now(), None));
        self.epoch[p].fetch_add(1, Ordering::SeqCst);
    }

    /// Proxy `p` is out of rotation (its health check failed).
    pub(crate) fn out(&self, p: usize) {
        self.up[p].store(false, Ordering::SeqCst);
    }

    /// Proxy `p` is ready again and back in rotation.
    pub(crate) fn back(&self, p: usize) {
        if let Some(w) = self.down.lock().expect("rotation lock")[p].last_mut() {
            w.1 = Some(Instant::now());
        }
        self.epoch[p].fetch_add(1, Ordering::SeqCst);
        self.up[p].store(true, Ordering::SeqCst);
    }

    fn pick(&self, preferred: usize) -> usize {
        let n = self.urls.len();
        (0..n).map(|k| (preferred + k) % n).find(|&p| self.up[p].load(Ordering::SeqCst)).unwrap_or(preferred)
    }

    fn refused(&self, p: usize, epoch: u64) {
        if self.epoch[p].load(Ordering::SeqCst) == epoch {
            self.up[p].store(false, Ordering::SeqCst);
        }
    }

    /// Whether proxy `p` was down at some moment of `[from, to]`.
    fn was_down(&self, p: usize, from: Instant, to: Instant) -> bool {
        let down = self.down.lock().expect("rotation lock");
        down[p].iter().any(|&(killed, back)| killed <= to && back.is_none_or(|b| b >= from))
    }
}

#[derive(Debug, Default)]
struct Shared {
    next: AtomicUsize,
    records: Mutex<Vec<Record>>,
}

/// The running load.
#[derive(Debug)]
pub(crate) struct Load {
    shared: Arc<Shared>,
    clients: Vec<JoinHandle<()>>,
    requests: usize,
}

impl Load {
    /// Starts the clients.
    pub(crate) fn start(plan: Plan, rotation: Arc<Rotation>) -> Self {
        let client: HttpClient =
            Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1_024).build_http();
        let shared = Arc::new(Shared::default());
        let plan = Arc::new(plan);
        let clients = (0..plan.concurrency.max(1))
            .map(|_| {
                let (client, shared, plan, rotation) =
                    (client.clone(), shared.clone(), plan.clone(), rotation.clone());
                tokio::spawn(async move {
                    loop {
                        let i = shared.next.fetch_add(1, Ordering::SeqCst);
                        if i >= plan.requests {
                            break;
                        }
                        let request = plan.request(i, rotation.urls.len());
                        let record = one(&client, &rotation, request, plan.timeout).await;
                        shared.records.lock().expect("records lock").push(record);
                    }
                })
            })
            .collect();
        Self { shared, clients, requests: plan.requests }
    }

    /// A handle on the issued count, for tasks that wait for a moment of the schedule.
    pub(crate) fn progress(&self) -> Progress {
        Progress { shared: self.shared.clone(), requests: self.requests }
    }

    /// Waits for every request to end; every record.
    pub(crate) async fn finish(mut self) -> anyhow::Result<Vec<Record>> {
        for c in std::mem::take(&mut self.clients) {
            c.await?;
        }
        Ok(std::mem::take(&mut *self.shared.records.lock().expect("records lock")))
    }
}

/// The issued count of a running load.
#[derive(Clone, Debug)]
pub(crate) struct Progress {
    shared: Arc<Shared>,
    requests: usize,
}

impl Progress {
    /// Requests issued so far.
    pub(crate) fn issued(&self) -> usize {
        self.shared.next.load(Ordering::SeqCst).min(self.requests)
    }

    /// Waits until `at` requests were issued (or all of them).
    pub(crate) async fn reached(&self, at: usize) {
        while self.shared.next.load(Ordering::SeqCst).min(self.requests) < at.min(self.requests) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

fn body(request: &Request) -> Value {
    json!({
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": format!("{}: what does a router do when a worker fails?", request.rid)},
        ],
        "max_tokens": request.max_tokens,
        "stream": request.stream,
    })
}

/// Sends `request` (again to the other proxy when one refuses the connection) and reads its
/// answer, within the client timeout and the client's own cancel.
async fn one(client: &HttpClient, rotation: &Rotation, request: Request, timeout: Duration) -> Record {
    let resent = AtomicU32::new(0);
    let received = AtomicUsize::new(0);
    let text = body(&request).to_string();
    let attempts = async {
        let mut p = rotation.pick(request.proxy);
        loop {
            let epoch = rotation.epoch[p].load(Ordering::SeqCst);
            let sent_at = Instant::now();
            let req = http::Request::post(format!("{}/v1/chat/completions", rotation.urls[p]))
                .header("content-type", "application/json")
                .header("x-request-id", &request.rid)
                .body(Full::new(Bytes::from(text.clone())))
                .expect("a valid request");
            match client.request(req).await {
                Err(e) if e.is_connect() => {
                    rotation.refused(p, epoch);
                    let n = resent.fetch_add(1, Ordering::SeqCst) + 1;
                    if n > 50 {
                        return End::Broken(format!("no proxy accepts a connection: {e}"));
                    }
                    let other = rotation.pick((p + 1) % rotation.urls.len());
                    if other == p {
                        // Both out of rotation: wait a moment for one to come back.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    p = other;
                }
                Err(e) => return transport(rotation, p, sent_at, format!("proxy-{p}: {}", chain(&e))),
                Ok(resp) => {
                    // Read here, where the body's type (hyper's) is inferred.
                    let status = resp.status();
                    let mut body = resp.into_body();
                    let mut bytes = Vec::new();
                    while let Some(frame) = body.frame().await {
                        match frame {
                            Ok(f) => {
                                if let Some(d) = f.data_ref() {
                                    bytes.extend_from_slice(d);
                                    received.store(bytes.len(), Ordering::SeqCst);
                                }
                            }
                            Err(e) => {
                                let e = format!("proxy-{p}: {status}, body cut: {}", chain(&e));
                                return transport(rotation, p, sent_at, e);
                            }
                        }
                    }
                    return classify(status, request.stream, &String::from_utf8_lossy(&bytes));
                }
            }
        }
    };
    let cancel = request.cancel_after.unwrap_or(Duration::MAX);
    let end = tokio::select! {
        end = attempts => end,
        () = tokio::time::sleep(cancel), if request.cancel_after.is_some() => End::Cancelled,
        () = tokio::time::sleep(timeout) => End::Hung { bytes: received.load(Ordering::SeqCst) },
    };
    Record { request, end, resent: resent.load(Ordering::SeqCst) }
}

/// An error with its sources.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

fn transport(rotation: &Rotation, p: usize, sent_at: Instant, error: String) -> End {
    if rotation.was_down(p, sent_at, Instant::now()) { End::Lost } else { End::Broken(error) }
}

/// How an answer that arrived whole ended.
pub(crate) fn classify(status: http::StatusCode, stream: bool, text: &str) -> End {
    if !status.is_success() {
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        return error_end(&format!("HTTP {}", status.as_u16()), &v["error"], text);
    }
    if stream {
        let events: Vec<&str> = text.split("\n\n").filter_map(|e| e.trim().strip_prefix("data: ")).collect();
        if let Some(at) = events.iter().position(|e| e.starts_with("{\"error\"")) {
            let v: Value = serde_json::from_str(events[at]).unwrap_or(Value::Null);
            return match error_end("SSE", &v["error"], events[at]) {
                End::Error { kind, message, .. } => End::Error { kind, message, chunks: at },
                other => other,
            };
        }
        return match events.last() {
            Some(&"[DONE]") => End::Ok,
            _ => End::Broken(format!("stream ended without [DONE] after {} events", events.len())),
        };
    }
    let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if v["choices"].is_array() {
        End::Ok
    } else if v["error"].is_object() {
        error_end("HTTP 200", &v["error"], text)
    } else {
        End::Broken(format!("200 without an answer: {}", text.chars().take(200).collect::<String>()))
    }
}

/// The kind of an error object: the proxy's (`code` a string: `upstream_error` gets its leg, the
/// first word of the message), or the engine's own (`code` its HTTP status).
fn error_end(prefix: &str, error: &Value, raw: &str) -> End {
    let message = error["message"].as_str().unwrap_or(raw).to_owned();
    let kind = match &error["code"] {
        Value::String(code) if code == "upstream_error" => {
            let leg = message.split_whitespace().next().unwrap_or("?");
            format!("{prefix} {code} ({leg})")
        }
        Value::String(code) => format!("{prefix} {code}"),
        Value::Number(code) => format!("{prefix} {code} from the engine: {}", engine_cause(&message)),
        _ => format!("{prefix} (no error code)"),
    };
    End::Error { kind, message, chunks: 0 }
}

/// What an engine's own error says, in short: the same cause gives the same kind.
fn engine_cause(message: &str) -> String {
    if message.starts_with("KV transfer") && message.contains("failed on the prefill") {
        "KV transfer failed on the prefill".to_owned()
    } else if message.starts_with("KV transfer") && message.contains("timed out") {
        "KV transfer timed out".to_owned()
    } else {
        let cut: String = message.chars().filter(|c| !c.is_ascii_digit()).take(48).collect();
        cut.trim().to_owned()
    }
}

#[cfg(test)]
mod tests;

//! The chaos test's clients: one request as a client behind a load balancer sends it (the other
//! proxy when a connection is refused, a client timeout, a cancellation on a seeded share), and
//! how its end is classified.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};

use super::{CLIENT_TIMEOUT, KILLED, SEED};
use crate::harness::MODEL;

/// The error kinds a client may see, and why each is expected.
pub(super) const ALLOWED: [(&str, &str); 4] = [
    // A whole (non-streamed) answer from the stalled decode never gets its head: 504 after the
    // proxies' --request-timeout-ms, both legs let go.
    ("HTTP 504 timeout", "non-streamed on the stalled decode"),
    // decode-0 cut a stream after tokens had reached the client: not retryable.
    ("SSE upstream_error (decode)", "decode-0 died mid-stream"),
    // prefill-0 died after the decode's first token had reached the client (before it, the
    // attempt is retried), so the failure is reported in the stream.
    ("SSE upstream_error (prefill)", "prefill-0 failed after the first token"),
    // The same, when the decode heard of the failed KV transfer first and ended its own stream.
    ("SSE 500 from the engine: KV transfer failed on the prefill", "prefill-0 failed, the decode said so"),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum End {
    Ok,
    Error(String),
    Cancelled,
    Hung,
    /// The connection broke while its proxy was down.
    Lost,
    Broken(String),
}

#[derive(Debug)]
pub(super) struct Record {
    pub(super) i: usize,
    pub(super) rid: String,
    pub(super) stream: bool,
    pub(super) end: End,
}

/// The clients' view of the proxies, as a load balancer in front of them keeps it.
#[derive(Debug)]
pub(super) struct Rotation {
    pub(super) urls: Vec<String>,
    pub(super) up: Vec<AtomicBool>,
    /// The killed proxy's down window: from its kill until it is back in rotation.
    pub(super) down: Mutex<Option<(Instant, Option<Instant>)>>,
}

impl Rotation {
    fn pick(&self, preferred: usize) -> usize {
        let n = self.urls.len();
        (0..n).map(|k| (preferred + k) % n).find(|&p| self.up[p].load(Ordering::SeqCst)).unwrap_or(preferred)
    }

    fn was_down(&self, p: usize, from: Instant, to: Instant) -> bool {
        let down = *self.down.lock().unwrap();
        p == KILLED && down.is_some_and(|(killed, back)| killed <= to && back.is_none_or(|b| b >= from))
    }

    /// A refused connection takes the killed proxy out of rotation while it is down.
    fn refused(&self, p: usize) {
        if p == KILLED && self.down.lock().unwrap().is_some_and(|(_, back)| back.is_none()) {
            self.up[p].store(false, Ordering::SeqCst);
        }
    }
}

fn classify(status: http::StatusCode, stream: bool, text: &str) -> End {
    let kind = |prefix: &str, error: &Value| {
        let message = error["message"].as_str().unwrap_or_default();
        match &error["code"] {
            Value::String(code) if code == "upstream_error" => {
                format!("{prefix} {code} ({})", message.split_whitespace().next().unwrap_or("?"))
            }
            Value::String(code) => format!("{prefix} {code}"),
            Value::Number(code) if message.contains("failed on the prefill") => {
                format!("{prefix} {code} from the engine: KV transfer failed on the prefill")
            }
            other => format!("{prefix} {other}: {message}"),
        }
    };
    if !status.is_success() {
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        return End::Error(kind(&format!("HTTP {}", status.as_u16()), &v["error"]));
    }
    if !stream {
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        return if v["choices"].is_array() {
            End::Ok
        } else {
            End::Broken(format!("200 without an answer: {text}"))
        };
    }
    let events = infera_testkit::sse::data(text);
    if let Some(e) = events.iter().find(|e| e.starts_with("{\"error\"")) {
        let v: Value = serde_json::from_str(e).unwrap_or(Value::Null);
        return End::Error(kind("SSE", &v["error"]));
    }
    match events.last().map(String::as_str) {
        Some("[DONE]") => End::Ok,
        _ => End::Broken(format!("stream ended without [DONE]: {text}")),
    }
}

/// Request `i`, sent to the proxies in turn (the other one when a connection is refused).
pub(super) async fn one(
    client: &Client<HttpConnector, Full<Bytes>>,
    rotation: &Rotation,
    i: usize,
) -> Record {
    let mut rng = SmallRng::seed_from_u64(SEED.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64);
    let (stream, max_tokens) = (rng.random_bool(0.5), rng.random_range(4..=48));
    let cancel = rng.random_bool(0.1).then(|| Duration::from_millis(rng.random_range(0..=150)));
    let rid = format!("chaos-{i}");
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": format!("{rid}: what does a router do when a worker fails?")}],
        "max_tokens": max_tokens,
        "stream": stream,
    })
    .to_string();
    let attempts = async {
        let mut p = rotation.pick(i % rotation.urls.len());
        for _ in 0..50 {
            let sent = Instant::now();
            let req = http::Request::post(format!("{}/v1/chat/completions", rotation.urls[p]))
                .header("content-type", "application/json")
                .header("x-request-id", &rid)
                .body(Full::new(Bytes::from(body.clone())))
                .unwrap();
            let broke = |e: String| {
                if rotation.was_down(p, sent, Instant::now()) { End::Lost } else { End::Broken(e) }
            };
            match client.request(req).await {
                Err(e) if e.is_connect() => {
                    rotation.refused(p);
                    let other = rotation.pick((p + 1) % rotation.urls.len());
                    if other == p {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    p = other;
                }
                Err(e) => return broke(format!("proxy-{p}: {e:?}")),
                Ok(resp) => {
                    let status = resp.status();
                    return match resp.into_body().collect().await {
                        Ok(b) => classify(status, stream, &String::from_utf8_lossy(&b.to_bytes())),
                        Err(e) => broke(format!("proxy-{p}: {status}, body cut: {e:?}")),
                    };
                }
            }
        }
        End::Broken("no proxy accepts a connection".to_owned())
    };
    let end = tokio::select! {
        end = attempts => end,
        () = tokio::time::sleep(cancel.unwrap_or(Duration::MAX)), if cancel.is_some() => End::Cancelled,
        () = tokio::time::sleep(CLIENT_TIMEOUT) => End::Hung,
    };
    Record { i, rid, stream, end }
}

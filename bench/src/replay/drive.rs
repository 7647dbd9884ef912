//! Sends one streamed chat completion to an OpenAI-compatible server and times it: TTFT (send →
//! first non-empty `delta.content`) and every gap between content chunks after that.
//!
//! The request asks for `stream_options.include_usage`, so the token counts come from
//! `usage.completion_tokens` (else the content chunks) and `usage.prompt_tokens` (else the
//! trace's input length).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::report::Sample;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DriveError {
    #[error("bad URL {0}")]
    Url(String),
    #[error("connect/send: {0}")]
    Send(#[from] hyper_util::client::legacy::Error),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("reading the stream: {0}")]
    Body(String),
    #[error("the stream ended without [DONE]")]
    NoDone,
}

/// Counters for the progress line.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) sent: AtomicUsize,
    pub(crate) done: AtomicUsize,
    pub(crate) failed: AtomicUsize,
}

/// An OpenAI-compatible server to replay against.
#[derive(Clone)]
pub(crate) struct Target {
    client: Client<HttpConnector, Full<Bytes>>,
    url: http::Uri,
    model: String,
    /// The run's start; samples are in ms from it.
    origin: Instant,
    pub(crate) progress: Arc<Progress>,
}

/// One request of the replay.
#[derive(Debug)]
pub(crate) struct Ask<'a> {
    /// The prompt text.
    pub(crate) prompt: String,
    /// The session named in `x-session-id` (`None`: not named).
    pub(crate) session: Option<&'a str>,
    /// The service class named in `x-infera-service-class` (`None`: not named).
    pub(crate) class: Option<super::goodput::Class>,
    /// The prompt's length by the trace (when the answer reports none).
    pub(crate) input_tokens: u32,
    /// The answer's length asked for.
    pub(crate) max_tokens: u32,
}

impl Target {
    /// `base_url` like `http://127.0.0.1:8000` or `http://host:8000/v1`.
    pub(crate) fn new(base_url: &str, model: &str, origin: Instant) -> Result<Self, DriveError> {
        let base = base_url.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/chat/completions")
        } else {
            format!("{base}/v1/chat/completions")
        };
        let url = url.parse().map_err(|_| DriveError::Url(base_url.to_owned()))?;
        let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(4096).build_http();
        Ok(Self { client, url, model: model.to_owned(), origin, progress: Arc::default() })
    }

    /// The same server counting into `other`'s progress (one progress line over several).
    pub(crate) fn sharing_progress(mut self, other: &Target) -> Self {
        self.progress = Arc::clone(&other.progress);
        self
    }

    fn ms(&self, t: Instant) -> f64 {
        t.duration_since(self.origin).as_secs_f64() * 1e3
    }

    /// Sends `ask.prompt` (`ask.input_tokens` long by the trace) asking for `ask.max_tokens`
    /// and times the stream.
    pub(crate) async fn send(&self, ask: Ask<'_>) -> Result<Sample, DriveError> {
        self.progress.sent.fetch_add(1, Ordering::Relaxed);
        let out = self.stream(ask).await;
        let counter = if out.is_ok() { &self.progress.done } else { &self.progress.failed };
        counter.fetch_add(1, Ordering::Relaxed);
        out
    }

    async fn stream(
        &self,
        Ask { prompt, session, class, input_tokens, max_tokens }: Ask<'_>,
    ) -> Result<Sample, DriveError> {
        let body = json!({
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let mut req = http::Request::post(self.url.clone()).header("content-type", "application/json");
        if let Some(session) = session {
            req = req.header("x-session-id", session);
        }
        if let Some(class) = class {
            // Each router reads its own header and ignores the other's.
            req = req.header("x-infera-service-class", class.name());
            req = req.header("x-smg-priority", class.smg_priority());
        }
        let req =
            req.body(Full::new(Bytes::from(body.to_string()))).map_err(|e| DriveError::Url(e.to_string()))?;
        let sent = Instant::now();
        let resp = self.client.request(req).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes).chars().take(300).collect();
            return Err(DriveError::Status { status: status.as_u16(), body: text });
        }
        let mut sse = SseLines::default();
        let mut stamps: Vec<Instant> = Vec::new();
        let (mut usage, mut prompt_usage, mut done) = (None, None, false);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| DriveError::Body(e.to_string()))?;
            let Some(data) = frame.data_ref() else { continue };
            let now = Instant::now();
            for event in sse.push(data) {
                match event {
                    Event::Done => done = true,
                    Event::Json(v) => {
                        if let Some(err) = v.get("error") {
                            return Err(DriveError::Body(err.to_string()));
                        }
                        let content = v.pointer("/choices/0/delta/content").and_then(Value::as_str);
                        if content.is_some_and(|c| !c.is_empty()) {
                            stamps.push(now);
                        }
                        if let Some(n) = v.pointer("/usage/completion_tokens").and_then(Value::as_u64) {
                            usage = Some(n);
                        }
                        if let Some(n) = v.pointer("/usage/prompt_tokens").and_then(Value::as_u64) {
                            prompt_usage = Some(n);
                        }
                    }
                }
            }
        }
        if !done {
            return Err(DriveError::NoDone);
        }
        let end = Instant::now();
        let first = stamps.first().copied().unwrap_or(end);
        Ok(Sample {
            sent_ms: self.ms(sent),
            ttft_ms: first.duration_since(sent).as_secs_f64() * 1e3,
            end_ms: self.ms(end),
            gaps_ms: stamps.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e3).collect(),
            tokens: usage.unwrap_or(stamps.len() as u64),
            input_tokens: prompt_usage.unwrap_or(u64::from(input_tokens)),
            class,
        })
    }
}

/// An SSE `data:` payload.
#[derive(Debug, PartialEq)]
enum Event {
    Json(Value),
    Done,
}

/// Splits SSE bytes into `data:` lines across frame boundaries.
#[derive(Default)]
struct SseLines {
    pending: Vec<u8>,
}

impl SseLines {
    fn push(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(nl) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else { continue };
            let data = data.trim();
            if data == "[DONE]" {
                events.push(Event::Done);
            } else if let Ok(v) = serde_json::from_str(data) {
                events.push(Event::Json(v));
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves one request on a fresh socket with a one-token stream; the request's head.
    async fn one_answer() -> (String, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let n = conn.read(&mut buf).await.unwrap();
            let body = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            conn.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buf[..n]).to_lowercase()
        });
        (base, served)
    }

    #[tokio::test]
    async fn a_session_is_named_in_x_session_id_only_when_asked() {
        for session in [Some("session-7"), None] {
            let (base, served) = one_answer().await;
            let target = Target::new(&base, "m", Instant::now()).unwrap();
            let ask = Ask { prompt: "hello".into(), session, class: None, input_tokens: 2, max_tokens: 1 };
            target.send(ask).await.unwrap();
            let head = served.await.unwrap();
            assert_eq!(head.contains("x-session-id: session-7"), session.is_some(), "{head}");
        }
    }

    #[test]
    fn sse_lines_survive_split_frames() {
        let mut s = SseLines::default();
        assert!(s.push(b"data: {\"a\":").is_empty());
        assert_eq!(
            s.push(b"1}\n\nevent: x\ndata: [DONE]\n\n"),
            vec![Event::Json(json!({"a": 1})), Event::Done]
        );
    }
}

//! The client load of the failover bench: a closed loop of streaming chat completions through
//! the proxies, each stream re-issued as soon as it ends, spread over the proxies in turn. Each
//! request asks for a length drawn uniformly from a range (seeded per stream): the long ones
//! outlive a failover, so the new leader has legs booked by the old one to take over, and the
//! short ones keep new picks arriving. A request fails when it does not answer 200, breaks, does not end with `data: [DONE]` or
//! takes longer than [`REQUEST_DEADLINE`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::json;
use tokio::task::JoinHandle;

use super::deploy::MODEL;

/// The longest a request may take before it counts as failed.
const REQUEST_DEADLINE: Duration = Duration::from_secs(60);
/// How many failure messages are kept for the report.
const KEPT_ERRORS: usize = 5;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

#[derive(Debug, Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
    errors: std::sync::Mutex<Vec<String>>,
}

/// What the load did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// Requests that streamed to `[DONE]`.
    pub(crate) ok: u64,
    /// Requests that did not.
    pub(crate) failed: u64,
    /// The first few failures.
    pub(crate) errors: Vec<String>,
    /// Seconds since the load started.
    pub(crate) secs: f64,
}

/// The running load.
#[derive(Debug)]
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    streams: Vec<JoinHandle<()>>,
    started: Instant,
}

impl Load {
    /// Starts `streams` closed-loop streams over `proxies` (base URLs), each request of
    /// `tokens.0..=tokens.1` tokens.
    pub(crate) fn start(proxies: &[String], streams: usize, tokens: (u32, u32), seed: u64) -> Self {
        let client: HttpClient =
            Client::builder(TokioExecutor::new()).pool_max_idle_per_host(256).build_http();
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let streams = (0..streams)
            .map(|i| {
                let url = format!("{}/v1/chat/completions", proxies[i % proxies.len()]);
                let (client, stop, counts) = (client.clone(), stop.clone(), counts.clone());
                let mut rng = SmallRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let req = request(&url, i, n, rng.random_range(tokens.0..=tokens.1));
                        match tokio::time::timeout(REQUEST_DEADLINE, stream(&client, req)).await {
                            Ok(Ok(())) => {
                                counts.ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(Err(e)) => counts.fail(format!("{url}: {e:#}")),
                            Err(_) => counts.fail(format!("{url}: no end within {REQUEST_DEADLINE:?}")),
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        Self { stop, counts, streams, started: Instant::now() }
    }

    /// What it did so far.
    pub(crate) fn outcome(&self) -> Outcome {
        Outcome {
            ok: self.counts.ok.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
            errors: self.counts.errors.lock().expect("errors lock").clone(),
            secs: self.started.elapsed().as_secs_f64(),
        }
    }

    /// Stops re-issuing, waits for the streams in flight to end, and says what it did.
    pub(crate) async fn stop(mut self) -> anyhow::Result<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for s in std::mem::take(&mut self.streams) {
            s.await?;
        }
        Ok(self.outcome())
    }
}

impl Counts {
    fn fail(&self, error: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut errors = self.errors.lock().expect("errors lock");
        if errors.len() < KEPT_ERRORS {
            errors.push(error);
        }
    }
}

/// Stream `stream`'s `n`-th request: a short multi-turn chat, a new prompt each time.
fn request(url: &str, stream: usize, n: u64, max_tokens: u32) -> http::Request<Full<Bytes>> {
    let body = json!({
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a patient assistant that explains failover."},
            {"role": "user", "content": format!("Stream {stream}, request {n}: how does a control plane fail over?")},
        ],
        "max_tokens": max_tokens,
        "stream": true,
    });
    http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request")
}

/// Sends `req` and reads its stream to the end.
async fn stream(client: &HttpClient, req: http::Request<Full<Bytes>>) -> anyhow::Result<()> {
    let resp = client.request(req).await?;
    let status = resp.status();
    let mut body = resp.into_body();
    if !status.is_success() {
        let text = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        anyhow::bail!("status {status}: {}", String::from_utf8_lossy(&text));
    }
    let mut done = false;
    while let Some(frame) = body.frame().await {
        if let Some(d) = frame?.data_ref() {
            done |= d.windows(12).any(|w| w == b"data: [DONE]");
        }
    }
    anyhow::ensure!(done, "stream ended without [DONE]");
    Ok(())
}

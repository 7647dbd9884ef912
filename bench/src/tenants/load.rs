//! The tenants bench's clients: per tenant, closed-loop callers of whole (non-streamed) chat
//! completions with the tenant's API key, spread over the routers in turn. Each caller sends its
//! next request as soon as the last one ends, whatever it answered (a shed 503 included: a
//! flooding client does not back off), except a 429: a rate limit (SMG's tenant limiter) is
//! waited out for its `Retry-After` (1 s without one, at most 60 s), as the OpenAI client
//! does, instead of being hammered. Every answer is kept with when it ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use infera_testkit::http::{Method, send};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// A word list the prompts are drawn from: every prompt differs, so no prefix is shared.
const WORDS: [&str; 16] = [
    "ledger", "decode", "prefill", "rank", "token", "stream", "share", "tenant", "queue", "batch", "control",
    "proxy", "engine", "cache", "step", "fleet",
];

/// One tenant's callers.
#[derive(Clone, Debug)]
pub(crate) struct TenantLoad {
    /// The tenant, as its API key is named.
    pub(crate) tenant: String,
    /// Its API key.
    pub(crate) key: String,
    /// How many callers it runs at once.
    pub(crate) callers: usize,
    /// Words per prompt.
    pub(crate) prompt_words: usize,
    /// Tokens asked per answer.
    pub(crate) max_tokens: u32,
}

/// One answered (or failed) request.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    /// Whose it was.
    pub(crate) tenant: String,
    /// When it ended.
    pub(crate) ended: Instant,
    /// How long it took.
    pub(crate) latency: Duration,
    /// The HTTP status (0: the connection failed).
    pub(crate) status: u16,
    /// The error code of a failed one (`shed`, `overloaded`, …), if it said.
    pub(crate) code: Option<String>,
    /// Its prompt tokens as the engine counted them (`usage.prompt_tokens`; 0 when failed).
    pub(crate) prompt_tokens: u64,
    /// The tokens it answered (`usage.completion_tokens`; 0 when failed).
    pub(crate) completion_tokens: u64,
}

/// The running callers.
#[derive(Debug)]
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Vec<Answer>>>,
    callers: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts every tenant's callers over `proxies` (base URLs), seeded by `seed`; the callers
    /// join one by one over `ramp`, tenants interleaved, so that the decode passes through
    /// every load on its way to saturation (control's step fit needs that variety to be
    /// able to predict).
    pub(crate) fn start(
        model: &str,
        proxies: &[String],
        tenants: &[TenantLoad],
        seed: u64,
        ramp: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let mut callers = Vec::new();
        for (t, load) in tenants.iter().enumerate() {
            for i in 0..load.callers {
                // Caller i of a tenant with n joins at i/n of the ramp: both tenants grow together.
                let delay = ramp.mul_f64(i as f64 / load.callers.max(1) as f64);
                let url = format!("{}/v1/chat/completions", proxies[(t + i) % proxies.len()]);
                let mut rng =
                    SmallRng::seed_from_u64(seed ^ ((t as u64) << 32 | i as u64).wrapping_mul(0x9E37_79B9));
                let (stop, answers, load, model) =
                    (stop.clone(), answers.clone(), load.clone(), model.to_owned());
                callers.push(tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let auth = format!("Bearer {}", load.key);
                    while !stop.load(Ordering::Relaxed) {
                        let prompt: Vec<&str> =
                            (0..load.prompt_words).map(|_| WORDS[rng.random_range(0..WORDS.len())]).collect();
                        let body = json!({
                            "model": model,
                            "messages": [{"role": "user", "content": prompt.join(" ")}],
                            "max_tokens": load.max_tokens,
                        });
                        let started = Instant::now();
                        let (answer, wait) = match call(&url, &body, &auth).await {
                            Ok(called) => {
                                (answer(&load.tenant, started, called.status, &called.body), called.wait)
                            }
                            Err(_) => (answer(&load.tenant, started, 0, ""), None),
                        };
                        answers.lock().await.push(answer);
                        if let Some(wait) = wait {
                            wait_unless_stopped(wait, &stop).await;
                        }
                    }
                }));
            }
        }
        Self { stop, answers, callers }
    }

    /// Stops sending, waits for the requests in flight to end, and gives every answer.
    pub(crate) async fn stop(self) -> anyhow::Result<Vec<Answer>> {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.callers {
            c.await?;
        }
        Ok(std::mem::take(&mut *self.answers.lock().await))
    }
}

/// Waits `wait`, or less once `stop` is set (a caller waiting out a 429 must not hold up the
/// end of the load).
async fn wait_unless_stopped(wait: Duration, stop: &AtomicBool) {
    let until = Instant::now() + wait;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        tokio::time::sleep(until.saturating_duration_since(Instant::now()).min(STOP_CHECK)).await;
    }
}

/// How often a waiting caller looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The longest `Retry-After` a caller waits.
const MOST_RETRY_AFTER: Duration = Duration::from_secs(60);

/// What one call answered.
struct Called {
    status: u16,
    body: String,
    /// How long to wait before the next call: a 429's `Retry-After`.
    wait: Option<Duration>,
}

/// POSTs `body` to `url` with the caller's `authorization`.
async fn call(url: &str, body: &Value, auth: &str) -> anyhow::Result<Called> {
    let headers = [("authorization", auth), ("content-type", "application/json")];
    let resp = send(Method::POST, url, Bytes::from(body.to_string()), &headers).await?;
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Called {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        wait: (status == 429).then(|| retry_wait(retry_after.as_deref())),
    })
}

/// A 429's wait: its `Retry-After` in whole seconds, 1 s without a readable one, at most
/// [`MOST_RETRY_AFTER`].
fn retry_wait(retry_after: Option<&str>) -> Duration {
    let secs = retry_after.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(1);
    Duration::from_secs(secs).min(MOST_RETRY_AFTER)
}

fn answer(tenant: &str, started: Instant, status: u16, body: &str) -> Answer {
    let ended = Instant::now();
    let body = serde_json::from_str::<Value>(body).unwrap_or(Value::Null);
    let usage = |field: &str| if status == 200 { body["usage"][field].as_u64().unwrap_or(0) } else { 0 };
    let (prompt_tokens, completion_tokens) = (usage("prompt_tokens"), usage("completion_tokens"));
    let code = body["error"]["code"].as_str().map(str::to_owned);
    Answer {
        tenant: tenant.to_owned(),
        ended,
        latency: ended - started,
        status,
        code,
        prompt_tokens,
        completion_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_waits_its_retry_after_within_bounds() {
        assert_eq!(retry_wait(Some("3")), Duration::from_secs(3));
        assert_eq!(retry_wait(None), Duration::from_secs(1), "none given");
        assert_eq!(retry_wait(Some("Wed, 21 Oct 2026 07:28:00 GMT")), Duration::from_secs(1), "a date");
        assert_eq!(retry_wait(Some("3600")), MOST_RETRY_AFTER);
    }
}

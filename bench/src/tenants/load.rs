//! The tenants bench's clients: per tenant, closed-loop callers of whole (non-streamed) chat
//! completions with the tenant's API key, spread over the proxies in turn. Each caller sends its
//! next request as soon as the last one ends, whatever it answered (a shed 503 included: a
//! flooding client does not back off). Every answer is kept with when it ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use infera_testkit::http::{Method, request_with};
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
                        let sent =
                            request_with(Method::POST, &url, Some(&body), &[("authorization", &auth)]).await;
                        let answer = answer(&load.tenant, started, sent);
                        answers.lock().await.push(answer);
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

fn answer(tenant: &str, started: Instant, sent: anyhow::Result<(http::StatusCode, String)>) -> Answer {
    let ended = Instant::now();
    let (status, body) = match sent {
        Ok((status, body)) => (status.as_u16(), serde_json::from_str::<Value>(&body).unwrap_or(Value::Null)),
        Err(_) => (0, Value::Null),
    };
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

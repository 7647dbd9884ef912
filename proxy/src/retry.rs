//! The attempts of one request before its first byte: route, dispatch, and on a failure a
//! retriable one (connect refused, 5xx, a prefill that died, an engine error event before any
//! token, no first byte by `--attempt-timeout-ms`) picks again — up to `--retries`,
//! with full-jitter backoff, passing by the targets it failed on — releasing each attempt's
//! legs exactly once, the failed leg with how it failed. Every rank at its cap in control is
//! waited on (not a retry) until the request's queue deadline.

use std::time::{Duration, Instant};

use http::HeaderMap;

use crate::admission;
use crate::control::Pick;
use crate::error::{Leg, Overload, ProxyError};
use crate::facts::Facts;
use crate::forward::{self, Dispatched};
use crate::route;
use crate::upstream::Upstreams;

/// How often and how patiently a request is retried (`--retries`, `--retry-backoff-ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retries {
    /// Retries at most.
    pub max: u32,
    /// The backoff's base.
    pub backoff: Duration,
    /// Each attempt's deadline for its first byte (`--attempt-timeout-ms`).
    pub attempt_timeout: Option<Duration>,
}

/// Sends `facts` (with `headers`) until an attempt's answer head arrives, or it fails for good.
pub async fn send(
    up: &Upstreams,
    retries: Retries,
    facts: &Facts,
    headers: &HeaderMap,
    deadline: Instant,
) -> Result<Dispatched, ProxyError> {
    let mut exclude = route::Exclude::default();
    // Retries so far (waits for room in control are not retries).
    let mut attempt = 0;
    loop {
        let route = match route::route(&up.link, facts, &exclude, deadline).await {
            Ok(route) => route,
            // Every rank at its cap: wait for room as long as the request may queue.
            Err(ProxyError::Overloaded { why: Overload::AtCapacity, .. })
                if Instant::now() + admission::CAPACITY_RETRY < deadline =>
            {
                tokio::time::sleep(admission::CAPACITY_RETRY).await;
                continue;
            }
            Err(e @ ProxyError::Overloaded { why, .. }) => {
                up.metrics.rejected(why.as_str());
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let prefill_target = route.prefill.as_ref().map(Pick::target);
        let decode_target = route.decode.target();
        match forward::dispatch(up, facts, route, headers, attempt, retries.attempt_timeout).await {
            Ok(dispatched) => return Ok(dispatched),
            Err(e) => {
                // Dispatching released the attempt's legs, a leg that failed on its worker with
                // how (outlier ejection counts it).
                if attempt >= retries.max || !e.retryable() {
                    return Err(e);
                }
                match e.leg_failure() {
                    Some((Leg::Prefill, _)) => exclude.prefill.extend(prefill_target),
                    _ => exclude.decode.push(decode_target),
                }
                let wait = retry_backoff(retries.backoff, attempt);
                attempt += 1;
                tracing::warn!(error = %e, attempt, wait_ms = wait.as_millis() as u64, "leg failed before the first byte; picking again elsewhere");
                up.metrics.retried();
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The wait before retry `attempt + 1`: uniform in `[0, base × 2^attempt]` (full jitter), so
/// that requests failed together do not retry together.
fn retry_backoff(base: Duration, attempt: u32) -> Duration {
    let cap = base.saturating_mul(1 << attempt.min(10));
    cap.mul_f64(rand::random::<f64>())
}

//! Admission: at most `--max-inflight` generation requests in flight through this proxy (0: no
//! limit); above it a request waits in a bounded queue (`--queue-depth`) for at most
//! `--queue-timeout-ms`, and is then answered `503` with `Retry-After`. A client that goes away
//! while it waits costs nothing: its place is given up with its future. Every rank at its cap in
//! control (`AT_CAPACITY`) is waited on the same way: the request picks again until a rank has
//! room or its queue time is up.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Overload, ProxyError};
use crate::metrics::ProxyMetrics;

/// How often a request whose every rank is at its cap picks again.
pub const CAPACITY_RETRY: Duration = Duration::from_millis(50);

/// The limits (`--max-inflight`, `--queue-depth`, `--queue-timeout-ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Requests in flight at most; 0 = no limit.
    pub max_inflight: usize,
    /// Requests waiting at most; more are refused at once.
    pub queue_depth: usize,
    /// The longest a request waits.
    pub queue_timeout: Duration,
}

/// The proxy's admission gate.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    permits: Option<Arc<Semaphore>>,
    waiting: AtomicUsize,
}

/// A request's place in flight, held until its answer ends; `None` inside without a limit.
#[derive(Debug)]
pub struct Admitted {
    _permit: Option<OwnedSemaphorePermit>,
    /// When the request may wait no longer (for room in control too).
    pub deadline: Instant,
}

/// Counts a waiter for as long as it waits.
struct Waiting<'a>(&'a AtomicUsize, &'a ProxyMetrics);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let left = self.0.fetch_sub(1, Ordering::AcqRel) - 1;
        self.1.queue_depth(left);
    }
}

impl Admission {
    /// A gate with `limits`.
    pub fn new(limits: Limits) -> Self {
        let permits = (limits.max_inflight > 0).then(|| Arc::new(Semaphore::new(limits.max_inflight)));
        Self { limits, permits, waiting: AtomicUsize::new(0) }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Waits for a place (bounded); `Overloaded` when the queue is full or the wait too long.
    pub async fn admit(&self, metrics: &ProxyMetrics) -> Result<Admitted, ProxyError> {
        let started = Instant::now();
        let deadline = started + self.limits.queue_timeout;
        let Some(permits) = &self.permits else { return Ok(Admitted { _permit: None, deadline }) };
        if let Ok(permit) = permits.clone().try_acquire_owned() {
            return Ok(Admitted { _permit: Some(permit), deadline });
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.limits.queue_depth {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(self.overloaded(Overload::QueueFull, metrics));
        }
        let _waiting = Waiting(&self.waiting, metrics);
        metrics.queue_depth(self.waiting.load(Ordering::Acquire));
        let permit = tokio::time::timeout_at(deadline.into(), permits.clone().acquire_owned()).await;
        metrics.queue_wait(started.elapsed());
        match permit {
            Ok(Ok(permit)) => Ok(Admitted { _permit: Some(permit), deadline }),
            _ => Err(self.overloaded(Overload::QueueTimeout, metrics)),
        }
    }

    /// The answer to a request that found no room (counted).
    pub fn overloaded(&self, why: Overload, metrics: &ProxyMetrics) -> ProxyError {
        metrics.rejected(why.as_str());
        ProxyError::Overloaded { why, retry_after: self.limits.queue_timeout.max(Duration::from_secs(1)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> ProxyMetrics {
        ProxyMetrics::register(&mut prometheus_client::registry::Registry::default())
    }

    #[tokio::test]
    async fn above_the_limit_requests_wait_in_a_bounded_queue_then_get_overloaded() {
        let m = metrics();
        let gate = Admission::new(Limits {
            max_inflight: 1,
            queue_depth: 1,
            queue_timeout: Duration::from_millis(200),
        });
        let first = gate.admit(&m).await.unwrap();
        let gate = Arc::new(gate);
        let (g, m2) = (gate.clone(), Arc::new(metrics()));
        let waiter = tokio::spawn({
            let m2 = m2.clone();
            async move { g.admit(&m2).await.map(|_| ()) }
        });
        // The second waits; a third finds the queue full at once.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let full = gate.admit(&m).await.unwrap_err();
        assert!(matches!(full, ProxyError::Overloaded { why: Overload::QueueFull, .. }), "{full}");
        drop(first);
        assert!(waiter.await.unwrap().is_ok(), "the waiter got the freed place");
        // Nobody frees the place now: the next waits out the timeout.
        let held = gate.admit(&m).await.unwrap();
        let timed_out = gate.admit(&m).await.unwrap_err();
        assert!(
            matches!(timed_out, ProxyError::Overloaded { retry_after, .. } if retry_after == Duration::from_secs(1))
        );
        drop(held);
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_gives_up_its_place_in_the_queue() {
        let m = metrics();
        let gate = Admission::new(Limits {
            max_inflight: 1,
            queue_depth: 1,
            queue_timeout: Duration::from_secs(10),
        });
        let held = gate.admit(&m).await.unwrap();
        // A client that disconnects: its future is dropped while queued.
        let gone = tokio::time::timeout(Duration::from_millis(20), gate.admit(&m)).await;
        assert!(gone.is_err());
        assert_eq!(gate.waiting.load(Ordering::Acquire), 0, "no place is kept for it");
        drop(held);
        assert!(gate.admit(&m).await.is_ok(), "nothing was lost");
        let open =
            Admission::new(Limits { max_inflight: 0, queue_depth: 0, queue_timeout: Duration::from_secs(1) });
        for _ in 0..100 {
            std::mem::forget(open.admit(&m).await.unwrap());
        }
    }
}

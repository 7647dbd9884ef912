//! Reading a request's body, within two bounds: its own size (`--max-body-bytes`, 413 above) and
//! the bytes every request being read or served may hold at once
//! (`--max-body-bytes-in-flight`, 503 `overloaded` with `Retry-After` when a body would pass
//! it). The first bounds one request; the second bounds them all, so that many clients sending
//! large bodies at once cannot take the proxy's memory, whatever `--max-connections` allows.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Overload, ProxyError};
use crate::metrics::ProxyMetrics;

/// How much of an oversized body is read and dropped before the 413, so that a client still
/// writing its body reads the answer instead of a broken pipe.
const OVERSIZE_DRAIN_BYTES: usize = 64 << 20;

/// The budget's unit: permits are KiB, so that a budget of many GiB fits a semaphore.
const UNIT: usize = 1 << 10;

/// The bytes every request body held now may add up to.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
}

/// A body's share of the budget, given back when it is dropped (with the request).
#[derive(Debug)]
pub struct BodyHold {
    _permit: Option<OwnedSemaphorePermit>,
}

impl BodyBudget {
    /// A budget of `bytes` (rounded up to whole KiB).
    pub fn new(bytes: usize) -> Self {
        let units = bytes.div_ceil(UNIT).min(Semaphore::MAX_PERMITS);
        Self { permits: Arc::new(Semaphore::new(units)) }
    }

    /// The bytes it has room for now.
    pub fn available(&self) -> usize {
        self.permits.available_permits() * UNIT
    }

    /// Takes room for `total` bytes in all, of which `held` already holds what it took before.
    fn grow(&self, held: &mut Option<OwnedSemaphorePermit>, total: usize) -> bool {
        let have = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        let want = total.div_ceil(UNIT);
        if want <= have {
            return true;
        }
        let Ok(more) = u32::try_from(want - have) else { return false };
        match self.permits.clone().try_acquire_many_owned(more) {
            Ok(p) => {
                match held {
                    Some(h) => h.merge(p),
                    None => *held = Some(p),
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// Reads `body` whole, at most `limit` bytes, taking its bytes from `budget` as they arrive. A
/// body declared (Content-Length) over the limit is drained without being kept.
///
/// # Errors
/// 413 over the limit, 503 `overloaded` when the budget has no room for it, 400 when the body
/// breaks off.
pub async fn read_body(
    body: Incoming,
    limit: usize,
    headers: &http::HeaderMap,
    budget: &BodyBudget,
    metrics: &ProxyMetrics,
) -> Result<(Bytes, BodyHold), ProxyError> {
    let too_large = ProxyError::BodyTooLarge { limit };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit.saturating_add(OVERSIZE_DRAIN_BYTES)) {
        return Err(too_large);
    }
    // Declared over the limit: refused, but read (and dropped) for the client's sake.
    let keep = declared.is_none_or(|n| n <= limit);
    let mut held = None;
    if let Some(n) = declared.filter(|_| keep)
        && !budget.grow(&mut held, n)
    {
        return Err(busy(metrics));
    }
    let mut body = body;
    let mut buf = bytes::BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| ProxyError::BadRequest("the request body could not be read"))?;
        if let Some(data) = frame.data_ref() {
            total = total.saturating_add(data.len());
            if keep && total <= limit {
                if !budget.grow(&mut held, total) {
                    return Err(busy(metrics));
                }
                buf.extend_from_slice(data);
            } else if total > limit.saturating_add(OVERSIZE_DRAIN_BYTES) {
                return Err(too_large);
            }
        }
    }
    if total > limit { Err(too_large) } else { Ok((buf.freeze(), BodyHold { _permit: held })) }
}

fn busy(metrics: &ProxyMetrics) -> ProxyError {
    let why = Overload::BodyBudget;
    metrics.rejected(why.as_str());
    ProxyError::Overloaded { why, retry_after: Duration::from_secs(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_grows_a_body_in_steps_and_gives_it_back_on_drop() {
        let budget = BodyBudget::new(10 * UNIT);
        let mut a = None;
        assert!(budget.grow(&mut a, 1));
        assert!(budget.grow(&mut a, 6 * UNIT));
        assert_eq!(budget.available(), 4 * UNIT, "a body holds its total, not the sum of its steps");
        let mut b = None;
        assert!(!budget.grow(&mut b, 5 * UNIT), "no room for a second body past the budget");
        assert!(budget.grow(&mut b, 4 * UNIT));
        assert_eq!(budget.available(), 0);
        drop(a);
        assert_eq!(budget.available(), 6 * UNIT);
        drop(b);
        assert_eq!(budget.available(), 10 * UNIT);
    }
}

//! Waiting on a condition without a sleep for readiness: poll it, briefly yielding between
//! tries, until it holds or a deadline passes — then fail with what was awaited.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long between two polls.
const INTERVAL: Duration = Duration::from_millis(10);

/// A condition did not hold in time.
#[derive(Debug, thiserror::Error)]
#[error("waited {waited:?} for {what}")]
pub struct Expired {
    /// What was awaited.
    pub what: String,
    /// How long.
    pub waited: Duration,
}

/// What a check returns: `true` / `Some(value)` when the condition holds.
pub trait Ready {
    /// What the wait yields.
    type Value;
    /// The value, once ready.
    fn ready(self) -> Option<Self::Value>;
}

impl Ready for bool {
    type Value = ();
    fn ready(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn ready(self) -> Option<T> {
        self
    }
}

/// Polls `check` until it is ready or `deadline` has passed since the first call.
pub async fn poll<R: Ready>(
    deadline: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> R,
) -> Result<R::Value, Expired> {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await.ready() {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            return Err(Expired { what: what.to_owned(), waited: deadline });
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

/// [`poll`], failing the test with what was awaited when the deadline passes.
///
/// # Panics
/// When `check` is not ready within `deadline`.
pub async fn eventually<R: Ready>(deadline: Duration, what: &str, check: impl AsyncFnMut() -> R) -> R::Value {
    poll(deadline, what, check).await.unwrap_or_else(|e| panic!("{e}"))
}

/// [`poll`] for code without a runtime: the check runs on this thread.
pub fn poll_blocking<R: Ready>(
    deadline: Duration,
    what: &str,
    mut check: impl FnMut() -> R,
) -> Result<R::Value, Expired> {
    let start = Instant::now();
    loop {
        if let Some(v) = check().ready() {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            return Err(Expired { what: what.to_owned(), waited: deadline });
        }
        std::thread::sleep(INTERVAL);
    }
}

/// [`poll_blocking`], failing the test when the deadline passes.
///
/// # Panics
/// When `check` is not ready within `deadline`.
pub fn eventually_blocking<R: Ready>(deadline: Duration, what: &str, check: impl FnMut() -> R) -> R::Value {
    poll_blocking(deadline, what, check).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `fut` to completion or fails after `deadline`, naming what it was.
pub async fn within<T>(deadline: Duration, what: &str, fut: impl Future<Output = T>) -> Result<T, Expired> {
    tokio::time::timeout(deadline, fut).await.map_err(|_| Expired { what: what.to_owned(), waited: deadline })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_values_come_back_and_expiry_names_what_was_awaited() {
        let mut n = 0;
        let v = poll(Duration::from_secs(5), "n to reach 3", async || {
            n += 1;
            (n >= 3).then_some(n)
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
        let e = poll(Duration::from_millis(30), "never", async || false).await.unwrap_err();
        assert_eq!(e.to_string(), "waited 30ms for never");
    }

    #[test]
    #[should_panic(expected = "waited 20ms for the moon")]
    fn eventually_blocking_panics_with_the_condition() {
        eventually_blocking(Duration::from_millis(20), "the moon", || false);
    }
}

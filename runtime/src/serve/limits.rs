//! What a listener holds every connection to, so that a client that stalls, never speaks, or
//! opens connections without end costs a bounded amount ([`ConnLimits`]); a cap on open
//! connections with its counters ([`Gate`]); and accepting with a backoff when the accept itself
//! fails (e.g. out of file descriptors), instead of retrying in a tight loop ([`accept`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits of one listener's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// A new connection's TLS handshake and first bytes, and every HTTP/1 request head (the
    /// wait for the next request on a kept-alive connection included), must arrive within this:
    /// a slow-loris or silent connection is closed then.
    pub header_read: Duration,
    /// Open connections at most; a connection past it is closed as soon as it is accepted.
    pub max_connections: usize,
    /// HTTP/2: concurrent streams on one connection.
    pub h2_max_concurrent_streams: u32,
    /// A request head's size (HTTP/1 headers; HTTP/2's header list), bytes.
    pub max_header_bytes: u32,
    /// HTTP/2: the interval of keep-alive pings, and how long an answer may take before the
    /// connection is closed (a peer that vanished without a FIN).
    pub h2_keep_alive: Duration,
}

impl ConnLimits {
    /// Safe defaults for a listener that faces clients.
    pub const DEFAULT: Self = Self {
        header_read: Duration::from_secs(10),
        max_connections: 10_000,
        h2_max_concurrent_streams: 256,
        max_header_bytes: 64 << 10,
        h2_keep_alive: Duration::from_secs(30),
    };
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The open-connection cap of a listener and what it counted, shared with whoever exports them.
#[derive(Debug)]
pub struct Gate {
    permits: Arc<Semaphore>,
    max: usize,
    /// Connections closed at once because the cap was reached.
    refused: AtomicU64,
    /// Accepts that failed (e.g. too many open files).
    accept_errors: AtomicU64,
}

/// A snapshot of a [`Gate`]'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateCounts {
    /// Connections open now.
    pub open: u64,
    /// Connections refused at the cap since start.
    pub refused: u64,
    /// Failed accepts since start.
    pub accept_errors: u64,
}

impl Gate {
    /// A cap of `max` open connections.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            refused: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
        })
    }

    /// A place for one more connection, held until the permit drops; `None` at the cap (counted).
    pub fn enter(&self) -> Option<OwnedSemaphorePermit> {
        let permit = self.permits.clone().try_acquire_owned().ok();
        if permit.is_none() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        permit
    }

    /// The counters now.
    pub fn counts(&self) -> GateCounts {
        GateCounts {
            open: (self.max - self.permits.available_permits()) as u64,
            refused: self.refused.load(Ordering::Relaxed),
            accept_errors: self.accept_errors.load(Ordering::Relaxed),
        }
    }
}

/// The first wait after a failed accept; each failure in a row doubles it up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// The longest wait between two accepts that fail.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The wait after `failures` accepts in a row have failed.
fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1 << failures.min(16)).min(MAX_BACKOFF)
}

/// The next connection of `listener` that fits under `gate`'s cap, with its place. A connection
/// past the cap is closed at once (its client sees a reset, not a hang); an accept that fails is
/// logged, counted, and followed by a growing wait, so running out of file descriptors does not
/// spin a core.
pub async fn accept(
    listener: &TcpListener,
    gate: &Gate,
) -> (TcpStream, std::net::SocketAddr, OwnedSemaphorePermit) {
    let mut failures = 0u32;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                failures = 0;
                match gate.enter() {
                    Some(permit) => return (stream, peer, permit),
                    None => {
                        tracing::debug!(%peer, max = gate.max, "connection refused: at the connection cap");
                        drop(stream);
                    }
                }
            }
            Err(e) => {
                gate.accept_errors.fetch_add(1, Ordering::Relaxed);
                let wait = backoff(failures);
                failures = failures.saturating_add(1);
                tracing::warn!(error = %e, wait_ms = wait.as_millis() as u64, "accept failed");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_grows_to_its_ceiling() {
        assert_eq!(backoff(0), Duration::from_millis(5));
        assert_eq!(backoff(1), Duration::from_millis(10));
        assert_eq!(backoff(7), Duration::from_millis(640));
        assert_eq!(backoff(8), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[tokio::test]
    async fn past_the_cap_a_connection_is_closed_and_counted_and_a_place_frees_on_drop() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Gate::new(1);
        let _first = TcpStream::connect(addr).await.unwrap();
        let (_s, _, held) = accept(&listener, &gate).await;
        assert_eq!(gate.counts().open, 1);
        let mut second = TcpStream::connect(addr).await.unwrap();
        // The second is refused while the first holds the only place; once the place is free,
        // the third gets in.
        let accepting = tokio::spawn(async move {
            let (s, _, p) = accept(&listener, &gate).await;
            (s, p, gate)
        });
        assert_eq!(second.read(&mut [0u8; 1]).await.unwrap_or(0), 0, "closed at the cap");
        drop(held);
        let _third = TcpStream::connect(addr).await.unwrap();
        let (_s, _p, gate) = accepting.await.unwrap();
        assert_eq!(gate.counts(), GateCounts { open: 1, refused: 1, accept_errors: 0 });
    }
}

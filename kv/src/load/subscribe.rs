//! Following one rank's load PUB socket: a SUB socket on [`LOAD_TOPIC`] connected with backoff
//! until the publisher is up, every message decoded and handed over with its `seq`. A gauge
//! needs no replay or gap handling: the newest reading wins, so lost messages and publisher
//! restarts (the `seq` starting over) need nothing but the next message.

use std::time::Duration;

use zeromq::{Socket as _, SocketOptions, SocketRecv as _, SubSocket, ZmqError};

use crate::frame_guard::{FrameGuard, MAX_FRAME_BYTES};

use super::{LOAD_TOPIC, LoadStat, decode_load_stat};
use crate::subscribe::frames;

/// First pause between connection attempts; doubles up to [`BACKOFF_MAX`].
const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest pause between connection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Deadline of one connection attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One message from the load socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadMessage {
    /// The publisher's sequence number (starts over when it restarts).
    pub seq: u64,
    /// The reading.
    pub stat: LoadStat,
}

/// Follows the load socket at `endpoint` (`tcp://host:port`, already offset by the rank) until
/// the future is dropped, calling `on_message` with every reading. Malformed frames and
/// undecodable payloads are logged (once per run of failures) and skipped.
pub async fn follow_load(endpoint: String, mut on_message: impl FnMut(LoadMessage)) {
    let mut failing = false;
    loop {
        let (mut socket, _guard) = connect(&endpoint).await;
        loop {
            match socket.recv().await {
                Ok(message) => {
                    let frames = message.into_vec();
                    let decoded = match frames::live(&frames, LOAD_TOPIC.as_bytes()) {
                        Ok(Some((seq, payload))) => decode_load_stat(&payload)
                            .map(|stat| LoadMessage { seq, stat })
                            .map_err(|e| e.to_string()),
                        Ok(None) => continue,
                        Err(e) => Err(e.to_string()),
                    };
                    match decoded {
                        Ok(m) => {
                            failing = false;
                            on_message(m);
                        }
                        Err(error) if !std::mem::replace(&mut failing, true) => {
                            tracing::warn!(endpoint, error, "load message ignored");
                        }
                        Err(_) => {}
                    }
                }
                // No peer left: start over with a fresh socket.
                Err(ZmqError::NoMessage) => break,
                Err(e) => tracing::debug!(endpoint, error = %e, "load stream interrupted"),
            }
        }
    }
}

/// A SUB socket connected to `endpoint` through a frame guard (kept as long as the socket),
/// retrying with backoff until the publisher is up.
async fn connect(endpoint: &str) -> (SubSocket, Option<FrameGuard>) {
    let mut delay = BACKOFF_INITIAL;
    loop {
        let mut options = SocketOptions::default();
        options.connect_timeout(CONNECT_TIMEOUT);
        let mut socket = SubSocket::with_options(options);
        let attempt = async {
            socket.subscribe(LOAD_TOPIC).await?;
            let guard = crate::frame_guard::guard(endpoint, MAX_FRAME_BYTES, CONNECT_TIMEOUT).await?;
            socket.connect(guard.as_ref().map_or(endpoint, FrameGuard::endpoint)).await?;
            Ok::<_, ZmqError>(guard)
        };
        match attempt.await {
            Ok(guard) => return (socket, guard),
            Err(e) => {
                tracing::debug!(endpoint, error = %e, retry_in = ?delay, "load publisher not reachable yet")
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(BACKOFF_MAX);
    }
}

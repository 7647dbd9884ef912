//! One rank's load PUB socket, as `SchedulerLoadPublisher` drives it (SGLang 0.5.23
//! `python/sglang/srt/managers/scheduler_components/load_publisher.py`): `[b"load", seq, payload]`
//! with `seq` counting from 0; a reading that differs from the last one sent goes out at once, an
//! unchanged one at most once per [`HEARTBEAT`]. No replay: a gauge's next reading supersedes a
//! lost one.

use std::time::{Duration, Instant};

use bytes::Bytes;
use zeromq::{PubSocket, Socket as _, SocketSend as _, ZmqMessage};

use super::{LOAD_TOPIC, LoadStat, encode_load_stat};
use crate::publish::{PublishError, bind_address, bound_port};

/// An unchanged reading is re-sent this often (SGLang's `LOAD_PUBLISH_HEARTBEAT_S`).
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// What was sent last, driving the dedup and the heartbeat.
#[derive(Debug, Clone, Copy)]
struct Sent {
    stat: LoadStat,
    at: Instant,
}

/// One rank's load publisher.
pub struct LoadPublisher {
    socket: PubSocket,
    port: u16,
    next_seq: u64,
    last: Option<Sent>,
}

impl std::fmt::Debug for LoadPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadPublisher").field("port", &self.port).field("next_seq", &self.next_seq).finish()
    }
}

impl LoadPublisher {
    /// Binds the PUB socket at `endpoint` (`tcp://host:port`, `*` for every interface, port 0
    /// picks one).
    ///
    /// # Errors
    /// When the endpoint is not `tcp://host:port` or cannot be bound.
    pub async fn bind(endpoint: &str) -> Result<Self, PublishError> {
        let mut socket = PubSocket::new();
        let bound = socket
            .bind(&bind_address(endpoint)?)
            .await
            .map_err(|source| PublishError::Bind { endpoint: endpoint.to_owned(), source })?;
        let port = bound_port(&bound, endpoint)?;
        Ok(Self { socket, port, next_seq: 0, last: None })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends `stat` if it differs from the last reading sent or the heartbeat is due at `now`;
    /// whether it was sent. A send that fails is logged and counts as not sent.
    pub async fn offer(&mut self, stat: LoadStat, now: Instant) -> bool {
        if self.last.is_some_and(|l| l.stat == stat && now.saturating_duration_since(l.at) < HEARTBEAT) {
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let frames = vec![
            Bytes::from_static(LOAD_TOPIC.as_bytes()),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            Bytes::from(encode_load_stat(&stat)),
        ];
        let Ok(message) = ZmqMessage::try_from(frames) else { return false };
        if let Err(e) = self.socket.send(message).await {
            tracing::debug!(seq, error = %e, "load reading not sent");
            return false;
        }
        self.last = Some(Sent { stat, at: now });
        true
    }

    /// Closes the socket (its port is free once this returns).
    pub async fn close(self) {
        for e in self.socket.close().await {
            tracing::debug!(error = %e, "closing the load PUB socket");
        }
    }
}

//! The publisher side, in SGLang's framing (`ZmqEventPublisher` in SGLang 0.5.23
//! `python/sglang/srt/disaggregation/kv_events.py`; 0.5.18's replay reply in the same file lacks
//! the topic frame), for the sim and tests.
//!
//! One [`Publisher`] is one DP rank's `ZmqEventPublisher`: a PUB socket sending
//! `[topic, seq u64 BE, payload]` with `seq` counting from 0, and optionally a ROUTER replay
//! socket answering `[identity, b"", start_seq]` from a ring buffer of the last
//! [`PublisherConfig::buffer_steps`] batches, in the reply format of the emulated SGLang version
//! ([`ReplayFormat`]), ended by the `seq = -1` marker. Both sockets may bind port 0; the bound
//! ports are reported. [`Publisher::publish`] never blocks: batches go through a bounded queue to
//! the socket task (as SGLang's publisher thread), and a full queue drops the batch.

mod replay;
mod task;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket as _};

pub use replay::ReplayFormat;

use crate::event::{EventBatch, KvEvent};
use crate::wire::Encoding;

/// The replay end marker's sequence number (`-1` as 8 bytes, big-endian).
pub const END_SEQ: [u8; 8] = [0xff; 8];

/// How a [`Publisher`] binds and writes.
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// PUB address, `tcp://host:port` (`*` binds every interface; port 0 picks a free port).
    pub endpoint: String,
    /// Replay ROUTER address, same form; `None` keeps no replay socket.
    pub replay_endpoint: Option<String>,
    /// First frame of every message.
    pub topic: String,
    /// Batches kept for replay (SGLang's `buffer_steps`).
    pub buffer_steps: usize,
    /// Batches queued for the socket task before [`Publisher::publish`] drops them.
    pub max_queue_size: usize,
    /// Event encoding.
    pub encoding: Encoding,
    /// Replay reply framing.
    pub replay_format: ReplayFormat,
    /// Written into batches that carry no `attn_dp_rank` (SGLang sets the publisher's rank).
    pub attn_dp_rank: Option<u32>,
}

impl PublisherConfig {
    /// SGLang's defaults (0.5.23 framing) for a PUB socket at `endpoint`, no replay socket.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            replay_endpoint: None,
            topic: String::new(),
            buffer_steps: 10_000,
            max_queue_size: 100_000,
            encoding: Encoding::Maps,
            replay_format: ReplayFormat::TopicSeqPayload,
            attn_dp_rank: None,
        }
    }

    /// The encoding and replay format of SGLang `version`.
    pub fn for_sglang(mut self, version: &str) -> Self {
        self.encoding = Encoding::for_sglang(version);
        self.replay_format = ReplayFormat::for_sglang(version);
        self
    }
}

/// Why a publisher could not start or take a batch.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The address is not `tcp://host:port`.
    #[error("KV-event endpoint {0:?} is not tcp://host:port")]
    Endpoint(String),
    /// Binding failed (port in use, bad host).
    #[error("cannot bind KV-event socket {endpoint}: {source}")]
    Bind {
        /// The endpoint that could not be bound.
        endpoint: String,
        /// ZeroMQ's error.
        #[source]
        source: zeromq::ZmqError,
    },
    /// The queue to the socket task is full; the batch was dropped.
    #[error("KV-event queue full ({0} batches); batch dropped")]
    QueueFull(usize),
    /// The socket task has stopped.
    #[error("KV-event publisher stopped")]
    Stopped,
}

/// What the socket task is asked to do.
#[derive(Debug)]
enum Command {
    /// Number, encode, buffer and send a batch (or only buffer it: the test hook).
    Publish { batch: EventBatch, live: bool },
    /// Answer once every earlier command is done.
    Flush(oneshot::Sender<()>),
}

/// Counters of one publisher.
#[derive(Debug, Default)]
pub struct PublisherStats {
    published: AtomicU64,
    dropped: AtomicU64,
    replays: AtomicU64,
}

impl PublisherStats {
    /// Batches numbered and sent (or buffered only).
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }
    /// Batches dropped: queue full, or past the wire caps.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    /// Replay requests answered.
    pub fn replays(&self) -> u64 {
        self.replays.load(Ordering::Relaxed)
    }
}

/// One DP rank's KV-event publisher. Dropping it stops both sockets in the background (batches
/// still queued are sent first); [`Publisher::close`] waits until they are closed.
#[derive(Debug)]
pub struct Publisher {
    tx: mpsc::Sender<Command>,
    port: u16,
    replay_port: Option<u16>,
    max_queue_size: usize,
    stats: Arc<PublisherStats>,
    /// Dropped with the publisher: stops the replay task.
    stop_replay: Option<oneshot::Sender<()>>,
    live_task: JoinHandle<()>,
    replay_task: Option<JoinHandle<()>>,
}

/// `tcp://host:port` → the address to bind (`*` → every interface).
pub(crate) fn bind_address(endpoint: &str) -> Result<String, PublishError> {
    let bad = || PublishError::Endpoint(endpoint.to_owned());
    let rest = endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    let host = match host {
        "*" | "" => "0.0.0.0",
        "[::]" | "::" => "[::]",
        h => h,
    };
    Ok(format!("tcp://{host}:{port}"))
}

pub(crate) fn bound_port(endpoint: &zeromq::Endpoint, asked: &str) -> Result<u16, PublishError> {
    match endpoint {
        zeromq::Endpoint::Tcp(_, port) => Ok(*port),
        _ => Err(PublishError::Endpoint(asked.to_owned())),
    }
}

impl Publisher {
    /// Binds the PUB (and replay) socket and starts the socket task. Needs a tokio runtime.
    pub async fn bind(config: PublisherConfig) -> Result<Self, PublishError> {
        let mut pub_socket = PubSocket::new();
        let address = bind_address(&config.endpoint)?;
        let bound = pub_socket
            .bind(&address)
            .await
            .map_err(|source| PublishError::Bind { endpoint: config.endpoint.clone(), source })?;
        let port = bound_port(&bound, &config.endpoint)?;
        let ring = Arc::new(replay::Ring::new(config.buffer_steps));
        let stats = Arc::new(PublisherStats::default());
        let (mut replay_port, mut stop_replay, mut replay_task) = (None, None, None);
        if let Some(endpoint) = &config.replay_endpoint {
            let mut router = RouterSocket::new();
            let address = bind_address(endpoint)?;
            let bound = router
                .bind(&address)
                .await
                .map_err(|source| PublishError::Bind { endpoint: endpoint.clone(), source })?;
            replay_port = Some(bound_port(&bound, endpoint)?);
            let (stop_tx, stop_rx) = oneshot::channel();
            stop_replay = Some(stop_tx);
            let server = replay::Server {
                router,
                ring: ring.clone(),
                topic: config.topic.clone().into_bytes().into(),
                format: config.replay_format,
                stats: stats.clone(),
            };
            replay_task = Some(tokio::spawn(server.run(stop_rx)));
        }
        let (tx, rx) = mpsc::channel(config.max_queue_size.max(1));
        let live = task::Live {
            socket: pub_socket,
            topic: config.topic.into_bytes().into(),
            encoding: config.encoding,
            attn_dp_rank: config.attn_dp_rank,
            ring,
            stats: stats.clone(),
            next_seq: 0,
        };
        let live_task = tokio::spawn(live.run(rx));
        Ok(Self {
            tx,
            port,
            replay_port,
            max_queue_size: config.max_queue_size.max(1),
            stats,
            stop_replay,
            live_task,
            replay_task,
        })
    }

    /// The PUB socket's bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The replay socket's bound port, if there is one.
    pub fn replay_port(&self) -> Option<u16> {
        self.replay_port
    }

    /// The publisher's counters, shared with its socket task.
    pub fn stats(&self) -> &Arc<PublisherStats> {
        &self.stats
    }

    /// Publishes one step's events, stamped now. Never blocks.
    pub fn publish(&self, events: Vec<KvEvent>) -> Result<(), PublishError> {
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.publish_batch(EventBatch { ts, events, attn_dp_rank: None })
    }

    /// Publishes a batch as given (its `attn_dp_rank` filled in when `None`). Never blocks.
    pub fn publish_batch(&self, batch: EventBatch) -> Result<(), PublishError> {
        self.send(Command::Publish { batch, live: true })
    }

    /// Test hook: numbers and buffers a batch for replay but does not send it live, so a
    /// subscriber sees a gap that replay can fill.
    pub fn publish_replay_only(&self, batch: EventBatch) -> Result<(), PublishError> {
        self.send(Command::Publish { batch, live: false })
    }

    /// Waits until every batch published before this call has been handed to the PUB socket.
    pub async fn flush(&self) -> Result<(), PublishError> {
        let (done, wait) = oneshot::channel();
        self.tx.send(Command::Flush(done)).await.map_err(|_| PublishError::Stopped)?;
        wait.await.map_err(|_| PublishError::Stopped)
    }

    /// Sends what is queued, then closes both sockets and waits until their ports are released
    /// (so a new publisher can bind them at once).
    pub async fn close(self) {
        let Self { tx, stop_replay, live_task, replay_task, .. } = self;
        drop(tx);
        drop(stop_replay);
        let _ = live_task.await;
        if let Some(task) = replay_task {
            let _ = task.await;
        }
    }

    fn send(&self, command: Command) -> Result<(), PublishError> {
        self.tx.try_send(command).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                PublishError::QueueFull(self.max_queue_size)
            }
            mpsc::error::TrySendError::Closed(_) => PublishError::Stopped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_bind_like_sglang() {
        assert_eq!(bind_address("tcp://*:5557").unwrap(), "tcp://0.0.0.0:5557");
        assert_eq!(bind_address("tcp://127.0.0.1:0").unwrap(), "tcp://127.0.0.1:0");
        for bad in ["ipc:///tmp/x", "tcp://h", "tcp://h:70000", "tcp://h:x"] {
            assert!(bind_address(bad).is_err(), "{bad}");
        }
    }
}

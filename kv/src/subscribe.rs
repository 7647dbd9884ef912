//! The subscriber side: one tokio task per (worker, DP rank) that follows the rank's PUB socket
//! and turns it into an ordered stream of batches for the consumer (control's index).
//!
//! The task connects a SUB socket to the rank's endpoint with the topic filter (retrying with
//! backoff until the publisher is up), reads `[topic, seq u64 BE, payload]` and tracks `seq`.
//! When batches were missed — a gap, or a first message other than seq 0 (late join) — it asks
//! the rank's replay ROUTER through a DEALER for everything from the first missing seq
//! (`[b"", start_seq]`), reading replies in both SGLang formats until the `seq = -1` end marker or
//! a deadline. If replay is not configured, fails, or comes back short, the consumer is told
//! [`EventKind::Reset`]: drop what it holds for this rank and rebuild from the batches that
//! follow, while the task carries on from the live stream.
//!
//! A publisher restart is told apart from a gap: a sequence that goes backwards resets, and each
//! replay (and the first message after the socket reconnected) starts one batch early, at the
//! last batch delivered, which must come back byte for byte — a different batch under that seq
//! means a new publisher: reset and replay it from 0. An undecodable payload resets too (its
//! events are lost). Malformed frames are counted and logged, never fatal. Counters:
//! [`SubscriberStats`].
//!
//! The task stops when the [`Subscriber`] handle is dropped or stopped, or when the consumer's
//! receiver is gone.

pub(crate) mod frames;
#[cfg(test)]
mod frames_fuzz;
mod replay;
mod sequencer;
mod stats;
mod task;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use frames::FrameError;
pub use stats::{StatsSnapshot, SubscriberStats};

use crate::event::EventBatch;
use crate::wire::WireError;

/// Where one rank publishes and how patiently to follow it.
#[derive(Clone, Debug)]
pub struct SubscriberConfig {
    /// The worker, carried in every [`SubscriberEvent`] and in logs.
    pub worker: Arc<str>,
    /// The DP rank.
    pub rank: u32,
    /// The rank's PUB socket, `tcp://host:port` (already offset by the rank).
    pub endpoint: String,
    /// The rank's replay ROUTER, `tcp://host:port`, if the worker keeps a replay buffer.
    pub replay_endpoint: Option<String>,
    /// The topic frame (SGLang's `topic`, empty by default).
    pub topic: String,
    /// Deadline of one replay exchange, connection included.
    pub replay_timeout: Duration,
    /// Deadline of one connection attempt of the SUB socket.
    pub connect_timeout: Duration,
    /// First pause between connection attempts; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest pause between connection attempts.
    pub backoff_max: Duration,
}

impl SubscriberConfig {
    /// Defaults (5 s replay deadline, 2 s connect attempts, backoff 100 ms → 5 s) for `rank` of
    /// `worker` publishing on `endpoint`, without replay and with the empty topic.
    pub fn new(worker: impl Into<Arc<str>>, rank: u32, endpoint: impl Into<String>) -> Self {
        Self {
            worker: worker.into(),
            rank,
            endpoint: endpoint.into(),
            replay_endpoint: None,
            topic: String::new(),
            replay_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// One thing the consumer must apply, in order, for (`worker`, `rank`).
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriberEvent {
    /// The worker ([`SubscriberConfig::worker`]).
    pub worker: Arc<str>,
    /// The DP rank.
    pub rank: u32,
    /// A batch, or the loss of some.
    pub kind: EventKind,
}

/// What a [`SubscriberEvent`] says.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// The next batch: sequence numbers increase by one between batches, except across a reset.
    Batch {
        /// Its sequence number.
        seq: u64,
        /// Its events, decoded.
        batch: EventBatch,
    },
    /// Drop everything held for this rank and rebuild from the batches that follow.
    Reset(ResetReason),
}

/// Why the consumer must rebuild.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ResetReason {
    /// Batches `from..to` were missed and could not be replayed.
    #[error("batches {from}..{to} missed: {why}")]
    Missed {
        /// The first missed.
        from: u64,
        /// The first one received after them.
        to: u64,
        /// Why replay did not recover them.
        why: ReplayFailure,
    },
    /// The sequence went backwards: the publisher restarted.
    #[error("publisher restarted: expected seq {expected}, got {got}")]
    PublisherRestarted {
        /// What was expected.
        expected: u64,
        /// The sequence number that arrived instead.
        got: u64,
    },
    /// A batch's payload could not be decoded, so its events are lost.
    #[error("batch {seq} undecodable: {error}")]
    Undecodable {
        /// Its sequence number.
        seq: u64,
        /// What the decoder rejected.
        error: WireError,
    },
}

/// Why replay did not recover a gap.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayFailure {
    /// The worker has no replay socket.
    #[error("no replay endpoint")]
    NotConfigured,
    /// The exchange did not finish in time.
    #[error("replay timed out after {0:?}")]
    Timeout(Duration),
    /// The DEALER could not connect, send or receive.
    #[error("replay socket failed: {0}")]
    Connect(String),
    /// A reply had bad frames.
    #[error("malformed replay reply: {0}")]
    Malformed(FrameError),
    /// More replies than the subscriber takes.
    #[error("replay sent more than {0} batches")]
    TooLong(usize),
    /// The buffer no longer holds the whole gap.
    #[error("replay buffer starts at {first:?}, short of the gap")]
    Incomplete {
        /// The first seq of the gap that came back, if any.
        first: Option<u64>,
    },
}

/// A running subscriber; dropping it stops the task.
#[derive(Debug)]
pub struct Subscriber {
    stats: Arc<SubscriberStats>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Subscriber {
    /// Starts following `config`'s rank, sending what the consumer must apply to `out`. Needs a
    /// tokio runtime.
    pub fn spawn(config: SubscriberConfig, out: mpsc::Sender<SubscriberEvent>) -> Self {
        let stats = Arc::new(SubscriberStats::default());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(task::Follower::new(config, out, stats.clone(), stopped).run());
        Self { stats, stop: Some(stop), task }
    }

    /// The subscriber's counters, shared with its task.
    pub fn stats(&self) -> &Arc<SubscriberStats> {
        &self.stats
    }

    /// Whether the task has ended (stopped, or its consumer went away).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the task and waits for it to end (its sockets closed).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

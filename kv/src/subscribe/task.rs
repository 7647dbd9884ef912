//! The subscriber task: connect with backoff, follow the live stream, fill gaps from replay.
//!
//! Continuity check: when a gap is filled from replay — and on the first message after the
//! socket lost its peer — the replay starts one batch early, at the last batch delivered, and
//! that batch must come back byte for byte. If it comes back different, the publisher restarted
//! and its new sequence has grown past ours: reset, and replay the new publisher from 0.
//!
//! Catch-up on join: a worker publishes from start-up (`AllBlocksCleared`, then every store), so
//! what it sent before we subscribed is only in its replay buffer. Right after the first connect
//! the follower asks for everything from seq 0 and delivers it, then skips the live copies of
//! those batches that the SUB socket received meanwhile.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;
use tokio::sync::{mpsc, oneshot};
use zeromq::{Socket as _, SocketEvent, SocketOptions, SocketRecv as _, SubSocket, ZmqError};

use crate::frame_guard::{FrameGuard, MAX_FRAME_BYTES};

use super::sequencer::{self, Arrival, Sequencer};
use super::stats::SubscriberStats;
use super::{EventKind, ReplayFailure, ResetReason, SubscriberConfig, SubscriberEvent, replay};
use crate::wire::decode_batch;

/// The task ends: stopped, or the consumer is gone.
#[derive(Debug)]
struct Stopped;

/// A connected SUB socket and its monitor (connection events).
/// A connected socket, its monitor, and the relay that bounds its frames (kept as long as it).
type Connected = (SubSocket, BoxStream<'static, SocketEvent>, Option<FrameGuard>);

/// One rank's follower.
pub(super) struct Follower {
    config: SubscriberConfig,
    out: mpsc::Sender<SubscriberEvent>,
    stats: Arc<SubscriberStats>,
    stop: oneshot::Receiver<()>,
    seq: Sequencer,
    /// The last batch delivered, `(seq, payload)`: the continuity anchor.
    last: Option<(u64, Bytes)>,
    /// The socket lost its peer since the last message: continuity must be checked.
    reconnected: bool,
    /// Batches delivered by the catch-up on join, until live messages pass them.
    joined: std::collections::HashMap<u64, Bytes>,
}

impl Follower {
    pub(super) fn new(
        config: SubscriberConfig,
        out: mpsc::Sender<SubscriberEvent>,
        stats: Arc<SubscriberStats>,
        stop: oneshot::Receiver<()>,
    ) -> Self {
        Self {
            config,
            out,
            stats,
            stop,
            seq: Sequencer::default(),
            last: None,
            reconnected: false,
            joined: std::collections::HashMap::new(),
        }
    }

    pub(super) async fn run(mut self) {
        let _ = self.follow().await;
        tracing::debug!(worker = %self.config.worker, rank = self.config.rank, "KV-event subscriber stopped");
    }

    async fn follow(&mut self) -> Result<(), Stopped> {
        loop {
            let (mut socket, mut monitor, _guard) = self.connect().await?;
            if self.seq.next().is_none() {
                self.catch_up().await?;
            }
            loop {
                let received = tokio::select! {
                    _ = &mut self.stop => return Err(Stopped),
                    Some(event) = monitor.next() => {
                        if let SocketEvent::Disconnected(_) = event {
                            self.reconnected = true;
                        }
                        continue;
                    }
                    received = socket.recv() => received,
                };
                match received {
                    Ok(message) => self.on_live(&message.into_vec()).await?,
                    // No peer left to read from: start over with a fresh socket.
                    Err(ZmqError::NoMessage) => break,
                    // The socket reconnects by itself; the continuity check covers what was lost.
                    Err(e) => {
                        self.reconnected = true;
                        tracing::debug!(worker = %self.config.worker, rank = self.config.rank,
                            error = %e, "KV-event stream interrupted");
                    }
                }
            }
            self.reconnected = true;
        }
    }

    /// A connected SUB socket, retrying with backoff until the publisher is up.
    async fn connect(&mut self) -> Result<Connected, Stopped> {
        let mut delay = self.config.backoff_initial;
        loop {
            let mut options = SocketOptions::default();
            options.connect_timeout(self.config.connect_timeout);
            let mut socket = SubSocket::with_options(options);
            let monitor = socket.monitor().boxed();
            let (endpoint, timeout) = (&self.config.endpoint, self.config.connect_timeout);
            let attempt = async {
                socket.subscribe(&self.config.topic).await?;
                let guard = crate::frame_guard::guard(endpoint, MAX_FRAME_BYTES, timeout).await?;
                socket.connect(guard.as_ref().map_or(endpoint.as_str(), FrameGuard::endpoint)).await?;
                Ok::<_, ZmqError>(guard)
            };
            let result = tokio::select! {
                _ = &mut self.stop => return Err(Stopped),
                result = attempt => result,
            };
            match result {
                Ok(guard) => {
                    SubscriberStats::add(&self.stats.connects, 1);
                    tracing::debug!(worker = %self.config.worker, rank = self.config.rank,
                        endpoint = %self.config.endpoint, "KV-event subscriber connected");
                    return Ok((socket, monitor, guard));
                }
                Err(e) => {
                    SubscriberStats::add(&self.stats.connect_failures, 1);
                    tracing::debug!(worker = %self.config.worker, rank = self.config.rank,
                        endpoint = %self.config.endpoint, error = %e, retry_in = ?delay,
                        "KV-event publisher not reachable yet");
                }
            }
            tokio::select! {
                _ = &mut self.stop => return Err(Stopped),
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(self.config.backoff_max.max(self.config.backoff_initial));
        }
    }

    /// Delivers what the publisher sent before we joined, from its replay buffer (see the module
    /// docs). Without a replay socket, or when it does not answer, the live stream decides.
    async fn catch_up(&mut self) -> Result<(), Stopped> {
        let Some(endpoint) = self.config.replay_endpoint.clone() else { return Ok(()) };
        let fetched = tokio::select! {
            _ = &mut self.stop => return Err(Stopped),
            fetched = replay::fetch(&endpoint, 0, self.config.replay_timeout) => fetched,
        };
        let replayed = match fetched {
            Ok(replayed) => replayed,
            Err(why) => {
                tracing::debug!(worker = %self.config.worker, rank = self.config.rank, %why,
                    "no catch-up from replay on join; following the live stream");
                return Ok(());
            }
        };
        SubscriberStats::add(&self.stats.replays, 1);
        let Some(newest) = replayed.iter().map(|(seq, _)| *seq).max() else { return Ok(()) };
        let fill = sequencer::fill(0, newest + 1, replayed);
        if !fill.complete {
            // The buffer no longer reaches back to seq 0: what came before it is lost.
            let why = ReplayFailure::Incomplete { first: fill.first };
            let to = fill.batches.first().map_or(newest + 1, |(seq, _)| *seq);
            self.reset(ResetReason::Missed { from: 0, to, why }).await?;
        }
        SubscriberStats::add(&self.stats.replayed_batches, fill.batches.len() as u64);
        for (seq, payload) in fill.batches {
            self.joined.insert(seq, payload.clone());
            self.deliver(seq, payload).await?;
        }
        Ok(())
    }

    async fn on_live(&mut self, frames: &[Bytes]) -> Result<(), Stopped> {
        let (seq, payload) = match super::frames::live(frames, self.config.topic.as_bytes()) {
            Ok(Some(message)) => message,
            Ok(None) => return Ok(()),
            Err(e) => {
                SubscriberStats::add(&self.stats.malformed, 1);
                tracing::warn!(worker = %self.config.worker, rank = self.config.rank, error = %e,
                    "malformed KV-event message ignored");
                return Ok(());
            }
        };
        if !self.joined.is_empty() {
            match self.joined.get(&seq) {
                // Already delivered by the catch-up.
                Some(p) if *p == payload => return Ok(()),
                Some(_) => {}
                None if self.seq.next().is_some_and(|next| seq >= next) => self.joined.clear(),
                None => {}
            }
        }
        let check = std::mem::take(&mut self.reconnected);
        match self.seq.arrival(seq) {
            Arrival::InOrder if !check => {}
            Arrival::InOrder | Arrival::Gap { .. } => self.recover(seq).await?,
            Arrival::Restarted { expected } => {
                self.restarted(expected, seq).await?;
                if seq > 0 {
                    self.recover(seq).await?;
                }
            }
        }
        self.deliver(seq, payload).await
    }

    async fn restarted(&mut self, expected: u64, got: u64) -> Result<(), Stopped> {
        self.seq.forget();
        self.last = None;
        self.reset(ResetReason::PublisherRestarted { expected, got }).await
    }

    /// Brings the stream up to just before live `to`: fills the gap from replay after checking
    /// continuity, or resets.
    async fn recover(&mut self, to: u64) -> Result<(), Stopped> {
        let (worker, rank) = (self.config.worker.clone(), self.config.rank);
        loop {
            let from = self.seq.next().unwrap_or(0);
            if from < to {
                SubscriberStats::add(&self.stats.gaps, 1);
            }
            let Some(endpoint) = self.config.replay_endpoint.clone() else {
                if from == to {
                    // Only a reconnect to check, and nothing to check it with.
                    return Ok(());
                }
                return self.reset(ResetReason::Missed { from, to, why: ReplayFailure::NotConfigured }).await;
            };
            let anchor = self.last.clone();
            let start = anchor.as_ref().map_or(from, |(seq, _)| *seq);
            SubscriberStats::add(&self.stats.replays, 1);
            tracing::info!(%worker, rank, from, to, "KV-event gap or reconnect; asking for replay");
            let fetched = tokio::select! {
                _ = &mut self.stop => return Err(Stopped),
                fetched = replay::fetch(&endpoint, start, self.config.replay_timeout) => fetched,
            };
            let replayed = match fetched {
                Ok(replayed) => replayed,
                Err(why) if from == to => {
                    tracing::warn!(%worker, rank, %why, "cannot check continuity after a reconnect");
                    return Ok(());
                }
                Err(why) => {
                    if matches!(why, ReplayFailure::Malformed(_)) {
                        SubscriberStats::add(&self.stats.malformed, 1);
                    }
                    return self.reset(ResetReason::Missed { from, to, why }).await;
                }
            };
            if let Some((seq, payload)) = anchor {
                let again = replayed.iter().find(|(s, _)| *s == seq).map(|(_, p)| p);
                if again.is_some_and(|p| *p != payload) {
                    self.restarted(from, to).await?;
                    continue;
                }
            }
            let fill = sequencer::fill(from, to, replayed);
            if !fill.complete {
                let why = ReplayFailure::Incomplete { first: fill.first };
                self.reset(ResetReason::Missed { from, to, why }).await?;
            }
            SubscriberStats::add(&self.stats.replayed_batches, fill.batches.len() as u64);
            for (seq, payload) in fill.batches {
                self.deliver(seq, payload).await?;
            }
            return Ok(());
        }
    }

    /// Decodes and hands over batch `seq`; an undecodable one resets.
    async fn deliver(&mut self, seq: u64, payload: Bytes) -> Result<(), Stopped> {
        self.seq.handled(seq);
        let decoded = decode_batch(&payload);
        self.last = Some((seq, payload));
        match decoded {
            Ok(batch) => {
                SubscriberStats::add(&self.stats.batches, 1);
                SubscriberStats::add(&self.stats.events, batch.events.len() as u64);
                self.emit(EventKind::Batch { seq, batch }).await
            }
            Err(error) => {
                SubscriberStats::add(&self.stats.malformed, 1);
                tracing::warn!(worker = %self.config.worker, rank = self.config.rank, seq, error = %error,
                    "undecodable KV-event batch");
                self.reset(ResetReason::Undecodable { seq, error }).await
            }
        }
    }

    async fn reset(&mut self, reason: ResetReason) -> Result<(), Stopped> {
        SubscriberStats::add(&self.stats.resets, 1);
        tracing::warn!(worker = %self.config.worker, rank = self.config.rank, %reason,
            "KV-event state reset");
        self.emit(EventKind::Reset(reason)).await
    }

    async fn emit(&mut self, kind: EventKind) -> Result<(), Stopped> {
        let event = SubscriberEvent { worker: self.config.worker.clone(), rank: self.config.rank, kind };
        tokio::select! {
            _ = &mut self.stop => Err(Stopped),
            sent = self.out.send(event) => sent.map_err(|_| Stopped),
        }
    }
}

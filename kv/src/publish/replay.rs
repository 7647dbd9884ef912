//! The replay side of a publisher: the ring buffer of recent batches and the ROUTER that answers
//! `[identity, b"", start_seq]` with every buffered batch from `start_seq` on, then the end marker.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;
use zeromq::{RouterSocket, Socket as _, SocketRecv as _, SocketSend as _, ZmqMessage};

use super::{END_SEQ, PublisherStats};
use crate::wire::sglang_at_least;

/// How replay replies are framed (after the ROUTER's identity frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplayFormat {
    /// `[b"", seq, payload]`, end `[b"", END_SEQ, b""]` (SGLang ≤ 0.5.21).
    SeqPayload,
    /// `[b"", topic, seq, payload]`, end `[b"", b"", END_SEQ, b""]` (SGLang ≥ 0.5.22).
    TopicSeqPayload,
}

impl ReplayFormat {
    /// The format SGLang `version` replies in; unparsable versions count as the newest.
    pub fn for_sglang(version: &str) -> Self {
        if sglang_at_least(version, [0, 5, 22]) { Self::TopicSeqPayload } else { Self::SeqPayload }
    }
}

/// The last `capacity` batches, `(seq, payload)`, oldest first.
#[derive(Debug)]
pub(super) struct Ring {
    capacity: usize,
    entries: Mutex<VecDeque<(u64, Bytes)>>,
}

impl Ring {
    pub(super) fn new(capacity: usize) -> Self {
        Self { capacity, entries: Mutex::new(VecDeque::with_capacity(capacity.min(1 << 16))) }
    }

    pub(super) fn push(&self, seq: u64, payload: Bytes) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if entries.len() == self.capacity {
            entries.pop_front();
        }
        entries.push_back((seq, payload));
    }

    /// The buffered batches with `seq >= start`.
    fn from(&self, start: u64) -> Vec<(u64, Bytes)> {
        let entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.iter().filter(|(seq, _)| *seq >= start).cloned().collect()
    }
}

/// The ROUTER task.
pub(super) struct Server {
    pub(super) router: RouterSocket,
    pub(super) ring: Arc<Ring>,
    pub(super) topic: Bytes,
    pub(super) format: ReplayFormat,
    pub(super) stats: Arc<PublisherStats>,
}

impl Server {
    /// Answers requests until `stop` fires (or its sender is dropped), then closes the socket
    /// (its port is free once this returns).
    pub(super) async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        loop {
            let request = tokio::select! {
                _ = &mut stop => break,
                request = self.router.recv() => request,
            };
            match request {
                Ok(request) => self.answer(request).await,
                Err(e) => {
                    tracing::warn!(error = %e, "KV-event replay socket failed; replay stops");
                    break;
                }
            }
        }
        for e in self.router.close().await {
            tracing::debug!(error = %e, "closing the KV-event replay socket");
        }
    }

    async fn answer(&mut self, request: ZmqMessage) {
        let frames = request.into_vec();
        let [identity, empty, start] = frames.as_slice() else {
            tracing::warn!(frames = frames.len(), "malformed KV-event replay request ignored");
            return;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
            tracing::warn!(len = start.len(), "replay request start_seq is not 8 bytes; ignored");
            return;
        };
        if !empty.is_empty() {
            tracing::warn!("replay request without the empty delimiter frame; ignored");
            return;
        }
        let start = u64::from_be_bytes(start);
        self.stats.replays.fetch_add(1, Ordering::Relaxed);
        let batches = self.ring.from(start);
        tracing::debug!(start, batches = batches.len(), "answering a KV-event replay");
        for (seq, payload) in batches {
            let seq = Bytes::copy_from_slice(&seq.to_be_bytes());
            if !self.reply(identity, Some(self.topic.clone()), seq, payload).await {
                return;
            }
        }
        let end = Bytes::from_static(&END_SEQ);
        self.reply(identity, Some(Bytes::new()), end, Bytes::new()).await;
    }

    /// Sends one reply frame set; whether the client is still there.
    async fn reply(&mut self, identity: &Bytes, topic: Option<Bytes>, seq: Bytes, payload: Bytes) -> bool {
        let mut frames = vec![identity.clone(), Bytes::new()];
        if self.format == ReplayFormat::TopicSeqPayload {
            frames.extend(topic);
        }
        frames.extend([seq, payload]);
        let Ok(message) = ZmqMessage::try_from(frames) else { return false };
        match self.router.send(message).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "replay client went away");
                false
            }
        }
    }
}

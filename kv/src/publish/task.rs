//! The live side of a publisher: numbers batches, encodes them, keeps them for replay and sends
//! `[topic, seq, payload]` on the PUB socket, one command at a time, in order.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tokio::sync::mpsc;
use zeromq::{PubSocket, Socket as _, SocketSend as _, ZmqMessage};

use super::replay::Ring;
use super::{Command, PublisherStats};
use crate::event::EventBatch;
use crate::wire::{Encoding, encode_batch};

/// The PUB task's state.
pub(super) struct Live {
    pub(super) socket: PubSocket,
    pub(super) topic: Bytes,
    pub(super) encoding: Encoding,
    pub(super) attn_dp_rank: Option<u32>,
    pub(super) ring: Arc<Ring>,
    pub(super) stats: Arc<PublisherStats>,
    pub(super) next_seq: u64,
}

impl Live {
    /// Runs until every [`super::Publisher`] handle is gone and the queue is drained, then
    /// closes the socket (its port is free once this returns).
    pub(super) async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        while let Some(command) = commands.recv().await {
            match command {
                Command::Publish { batch, live } => self.publish(batch, live).await,
                Command::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
        for e in self.socket.close().await {
            tracing::debug!(error = %e, "closing the KV-event PUB socket");
        }
    }

    async fn publish(&mut self, mut batch: EventBatch, live: bool) {
        if batch.attn_dp_rank.is_none() {
            batch.attn_dp_rank = self.attn_dp_rank;
        }
        let payload = match encode_batch(&batch, self.encoding) {
            Ok(p) => Bytes::from(p),
            Err(e) => {
                tracing::error!(error = %e, "KV-event batch cannot be encoded; dropped");
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.ring.push(seq, payload.clone());
        self.stats.published.fetch_add(1, Ordering::Relaxed);
        if !live {
            return;
        }
        let frames = vec![self.topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload];
        let Ok(message) = ZmqMessage::try_from(frames) else { return };
        if let Err(e) = self.socket.send(message).await {
            tracing::warn!(seq, error = %e, "KV-event batch not sent");
        }
    }
}

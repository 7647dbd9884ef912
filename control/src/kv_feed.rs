//! The KV-event feed: keeps one subscriber per (worker, rank) of every worker whose record names
//! KV-event sockets, and applies what they deliver to the prefix index.
//!
//! ```text
//! registry change ──▶ KvFeed::follow / forget ──▶ Subscriber per rank (infera_kv::subscribe)
//!                                                        │ SubscriberEvent (ordered per rank)
//!                                                        ▼
//!                       consumer task ──▶ index.apply_batch / clear_target (write lock, one batch)
//! ```
//!
//! A worker that leaves (or whose sockets change) has its subscribers stopped and its targets
//! cleared from the index; events of a worker the feed no longer follows are dropped on arrival,
//! so nothing of a departed worker comes back. The feed keeps each followed rank's target key, so
//! ingest never takes the routing lock that picks wait on. A `Reset` from a subscriber (missed batches that
//! replay could not recover, a restarted publisher, an undecodable batch) clears that target,
//! which then rebuilds from the batches that follow.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use infera_kv::subscribe::{EventKind, StatsSnapshot, Subscriber, SubscriberConfig, SubscriberEvent};
use infera_proto::types::{KvEventsSource, WorkerId, WorkerRecord};
use tokio::sync::mpsc;

use crate::metrics::{KvCounters, KvMetrics};
use crate::state::ControlState;
use crate::view::TargetKey;

/// Batches that may wait between the subscribers and the consumer; a slow consumer makes the
/// subscribers wait (ZMQ then buffers, up to its high-water mark).
const QUEUE: usize = 4096;

/// The subscribers of one worker.
#[derive(Debug)]
struct Followed {
    source: KvEventsSource,
    /// Each rank's target key, by rank.
    keys: Vec<TargetKey>,
    ranks: Vec<Subscriber>,
    /// Subscriber counters already exported, per rank.
    exported: Vec<StatsSnapshot>,
}

/// The feed's subscribers, by worker.
#[derive(Debug)]
pub struct KvFeed {
    followed: Mutex<HashMap<WorkerId, Followed>>,
    tx: mpsc::Sender<SubscriberEvent>,
}

impl KvFeed {
    /// A feed and the receiving end its consumer ([`consume`]) drains.
    pub fn new() -> (Self, mpsc::Receiver<SubscriberEvent>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Self { followed: Mutex::new(HashMap::new()), tx }, rx)
    }

    /// Follows a worker's KV events (or stops, when its record names none); `keys` are its ranks'
    /// target keys, by rank. Returns the keys whose index must be cleared because their subscribers
    /// were replaced or stopped.
    pub fn follow(&self, record: &WorkerRecord, keys: Vec<TargetKey>) -> Vec<TargetKey> {
        let mut followed = self.lock();
        let unchanged = followed
            .get(&record.id)
            .is_some_and(|f| Some(&f.source) == record.kv_events.as_ref() && f.keys == keys);
        if unchanged {
            return Vec::new();
        }
        let mut cleared = Self::stop(&mut followed, &record.id);
        let Some(source) = &record.kv_events else { return cleared };
        let mut ranks = Vec::new();
        for rank in 0..record.dp_size {
            let (endpoint, replay) = match source.for_rank(rank) {
                Ok(eps) => eps,
                Err(e) => {
                    // Records are checked before they get here; log rather than crash if not.
                    tracing::warn!(worker = %record.id, rank, error = e, "cannot follow KV events");
                    continue;
                }
            };
            let mut config = SubscriberConfig::new(record.id.as_str(), rank, endpoint);
            config.replay_endpoint = replay;
            config.topic = source.topic.clone();
            ranks.push(Subscriber::spawn(config, self.tx.clone()));
        }
        tracing::info!(worker = %record.id, ranks = ranks.len(), endpoint = %source.endpoint, "following KV events");
        cleared.extend(keys.iter().copied());
        let exported = vec![StatsSnapshot::default(); ranks.len()];
        followed.insert(record.id.clone(), Followed { source: source.clone(), keys, ranks, exported });
        cleared
    }

    /// Stops following a worker; returns its targets' keys, to clear from the index.
    pub fn forget(&self, worker: &WorkerId) -> Vec<TargetKey> {
        Self::stop(&mut self.lock(), worker)
    }

    /// Stops every subscriber (shutdown).
    pub fn stop_all(&self) {
        self.lock().clear();
    }

    /// The target key of `rank` of `worker`, while the feed follows the worker (events of a
    /// worker it no longer follows are not wanted).
    pub fn key_of(&self, worker: &str, rank: u32) -> Option<TargetKey> {
        self.lock().get(worker).and_then(|f| f.keys.get(rank as usize).copied())
    }

    /// Subscribers running now.
    pub fn subscribers(&self) -> usize {
        self.lock().values().map(|f| f.ranks.len()).sum()
    }

    /// Moves every subscriber's counters since the last call into `metrics`.
    pub fn export(&self, metrics: &KvMetrics) {
        for (worker, f) in self.lock().iter_mut() {
            for (rank, (sub, last)) in f.ranks.iter().zip(f.exported.iter_mut()).enumerate() {
                let now = sub.stats().snapshot();
                metrics.subscriber(worker.as_str(), rank as u32, &delta(&now, last));
                *last = now;
            }
        }
    }

    fn stop(followed: &mut HashMap<WorkerId, Followed>, worker: &WorkerId) -> Vec<TargetKey> {
        // Dropping a subscriber stops its task.
        followed.remove(worker).map(|f| f.keys).unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WorkerId, Followed>> {
        self.followed.lock().expect("kv feed poisoned by an earlier panic")
    }
}

fn delta(now: &StatsSnapshot, last: &StatsSnapshot) -> KvCounters {
    KvCounters {
        batches: now.batches - last.batches,
        gaps: now.gaps - last.gaps,
        replays: now.replays - last.replays,
        resets: now.resets - last.resets,
        malformed: now.malformed - last.malformed,
    }
}

/// Applies what the subscribers deliver to the index until `stop` resolves; then stops them.
pub async fn consume(
    state: Arc<ControlState>,
    mut rx: mpsc::Receiver<SubscriberEvent>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    loop {
        let ev = tokio::select! {
            _ = &mut stop => break,
            ev = rx.recv() => match ev {
                Some(ev) => ev,
                None => break,
            },
        };
        let Some(key) = state.kv_feed().key_of(&ev.worker, ev.rank) else { continue };
        let poisoned = "kv index poisoned by an earlier panic";
        match &ev.kind {
            EventKind::Batch { batch, .. } => {
                // Hash under the read lock; only the map updates hold picks off.
                let prepared = state.kv().read().expect(poisoned).prepare(key, &batch.events);
                state.kv().write().expect(poisoned).commit(key, prepared);
            }
            EventKind::Reset(reason) => {
                tracing::warn!(worker = %ev.worker, rank = ev.rank, %reason,
                    "KV events lost; the target's index is rebuilt from here");
                state.kv().write().expect(poisoned).clear_target(key);
            }
        }
    }
    state.kv_feed().stop_all();
}

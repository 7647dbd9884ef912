//! The KV-event feed: keeps one subscriber per (worker, rank) of every worker whose record names
//! KV-event sockets, and applies what they deliver to the prefix index it owns.
//!
//! ```text
//! registry change ──▶ KvFeed::follow / forget ──▶ Subscriber per rank (infera_kv::subscribe)
//!                                                        │ SubscriberEvent (ordered per rank)
//!                                                        ▼
//!                       consumer task ──▶ SharedIndex::ingest / clear (write lock, a part at a time)
//! ```
//!
//! A worker that leaves (or whose sockets change) has its subscribers stopped and its targets
//! cleared from the index (by the feed itself, as it stops them); events of a worker the feed no longer follows are dropped on arrival,
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
use crate::routing::KvIndex;
use crate::target::TargetKey;

mod shared;

pub use shared::{COMMIT_PART_BLOCKS, SharedIndex};

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

/// The feed's subscribers, by worker, and the prefix index they fill.
#[derive(Debug)]
pub struct KvFeed {
    followed: Mutex<HashMap<WorkerId, Followed>>,
    tx: mpsc::Sender<SubscriberEvent>,
    /// Written by the consumer and when subscribers stop; read by prefill picks (before, never
    /// while, they hold the routing lock).
    index: SharedIndex,
    metrics: KvMetrics,
}

impl KvFeed {
    /// A feed filling `index`, counting into `metrics`, and the receiving end its consumer
    /// ([`consume`]) drains.
    pub fn new(index: KvIndex, metrics: KvMetrics) -> (Self, mpsc::Receiver<SubscriberEvent>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Self { followed: Mutex::new(HashMap::new()), tx, index: SharedIndex::new(index), metrics }, rx)
    }

    /// The prefix index, for a pick to read.
    pub fn index(&self) -> std::sync::RwLockReadGuard<'_, KvIndex> {
        self.index.read()
    }

    /// Follows a worker's KV events (or stops, when its record names none); `keys` are its ranks'
    /// target keys, by rank. The targets whose subscribers were replaced or stopped are cleared
    /// from the index.
    pub fn follow(&self, record: &WorkerRecord, keys: Vec<TargetKey>) {
        let cleared = self.resubscribe(record, keys);
        self.index.clear(&cleared);
    }

    /// Stops following a worker and clears its targets from the index.
    pub fn forget(&self, worker: &WorkerId) {
        let cleared = Self::stop(&mut self.lock(), worker);
        self.index.clear(&cleared);
    }

    /// The subscriber change of [`follow`](Self::follow); returns the keys to clear.
    fn resubscribe(&self, record: &WorkerRecord, keys: Vec<TargetKey>) -> Vec<TargetKey> {
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

    /// Stops every subscriber (shutdown).
    pub fn stop_all(&self) {
        self.lock().clear();
    }

    /// The target key of `rank` of `worker`, while the feed follows the worker (events of a
    /// worker it no longer follows are not wanted).
    fn key_of(&self, worker: &str, rank: u32) -> Option<TargetKey> {
        self.lock().get(worker).and_then(|f| f.keys.get(rank as usize).copied())
    }

    /// Subscribers running now.
    pub fn subscribers(&self) -> usize {
        self.lock().values().map(|f| f.ranks.len()).sum()
    }

    /// Moves every subscriber's counters since the last call, and the index's size, into the
    /// metrics.
    pub fn export_metrics(&self) {
        for (worker, f) in self.lock().iter_mut() {
            for (rank, (sub, last)) in f.ranks.iter().zip(f.exported.iter_mut()).enumerate() {
                let now = sub.stats().snapshot();
                self.metrics.subscriber(worker.as_str(), rank as u32, &delta(&now, last));
                *last = now;
            }
        }
        let stats = self.index().stats();
        self.metrics.index(&stats, self.subscribers());
    }

    /// Applies one subscriber event to the index; events of a worker no longer followed are dropped.
    fn apply(&self, ev: &SubscriberEvent) {
        let Some(key) = self.key_of(&ev.worker, ev.rank) else { return };
        match &ev.kind {
            EventKind::Batch { batch, .. } => {
                // Asked again under the index's writers' lock: a worker forgotten since (and its
                // target cleared) gets nothing back.
                let followed = || self.key_of(&ev.worker, ev.rank) == Some(key);
                self.index.ingest(key, &batch.events, followed);
            }
            EventKind::Reset(reason) => {
                tracing::warn!(worker = %ev.worker, rank = ev.rank, %reason,
                    "KV events lost; the target's index is rebuilt from here");
                self.index.clear(&[key]);
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
    feed: Arc<KvFeed>,
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
        feed.apply(&ev);
    }
    feed.stop_all();
}

//! Counters of one subscriber, readable at any time (metrics).

use std::ops::AddAssign;
use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters, updated by the subscriber task.
#[derive(Debug, Default)]
pub struct SubscriberStats {
    pub(super) batches: AtomicU64,
    pub(super) events: AtomicU64,
    pub(super) gaps: AtomicU64,
    pub(super) replays: AtomicU64,
    pub(super) replayed_batches: AtomicU64,
    pub(super) resets: AtomicU64,
    pub(super) malformed: AtomicU64,
    pub(super) connects: AtomicU64,
    pub(super) connect_failures: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Batches delivered (live and replayed).
    pub batches: u64,
    /// Events in those batches.
    pub events: u64,
    /// Sequence gaps seen (a late join whose first message is not seq 0 counts as one).
    pub gaps: u64,
    /// Replay requests made (gaps, late joins, continuity checks after a reconnect).
    pub replays: u64,
    /// Batches delivered from replay.
    pub replayed_batches: u64,
    /// Resets told to the consumer.
    pub resets: u64,
    /// Messages with bad frames, replay replies with bad frames, undecodable payloads.
    pub malformed: u64,
    /// Successful connections of the SUB socket (the socket's own reconnects not included).
    pub connects: u64,
    /// Failed connection attempts.
    pub connect_failures: u64,
}

impl SubscriberStats {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            batches: get(&self.batches),
            events: get(&self.events),
            gaps: get(&self.gaps),
            replays: get(&self.replays),
            replayed_batches: get(&self.replayed_batches),
            resets: get(&self.resets),
            malformed: get(&self.malformed),
            connects: get(&self.connects),
            connect_failures: get(&self.connect_failures),
        }
    }
}

impl AddAssign for StatsSnapshot {
    /// Sums counters (several ranks or workers into one metric).
    fn add_assign(&mut self, o: Self) {
        self.batches += o.batches;
        self.events += o.events;
        self.gaps += o.gaps;
        self.replays += o.replays;
        self.replayed_batches += o.replayed_batches;
        self.resets += o.resets;
        self.malformed += o.malformed;
        self.connects += o.connects;
        self.connect_failures += o.connect_failures;
    }
}

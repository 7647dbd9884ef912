//! Engine readings: what each worker's SGLang engine says it holds, per DP rank, read from its
//! `GET /v1/loads` on a short interval (`--engine-poll-ms`; SGLang's own router polls every
//! 100 ms). The ledger says what control booked; the readings say what the engines run and
//! queue. `Admin/ListTargets` shows both, with their difference (the drift), and so do the
//! `infera_router_engine_*` gauges.
//!
//! - [`loads`]: the `/v1/loads` body → one [`EngineLoad`] per rank (pure).
//! - [`poll`]: one task per worker, filling the [`EngineBoard`].
//! - [`metrics`]: the per-target gauges.
//!
//! Readings live outside the routing lock: pollers write the board, readers copy from it.

pub mod loads;
pub mod metrics;
mod poll;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use infera_proto::types::{DpRank, Target, WorkerId, WorkerRecord};
use tokio::task::JoinHandle;

pub use self::loads::EngineLoad;

/// One rank's latest reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// What the engine reported.
    pub load: EngineLoad,
    /// When the answer arrived.
    pub at: Instant,
}

/// The latest reading of every followed rank.
#[derive(Debug, Default)]
pub struct EngineBoard {
    readings: RwLock<HashMap<Target, Reading>>,
}

impl EngineBoard {
    /// The latest reading of `target`, if its worker has answered yet.
    pub fn get(&self, target: &Target) -> Option<Reading> {
        self.readings.read().expect("engine board lock").get(target).copied()
    }

    /// Every reading.
    pub fn snapshot(&self) -> Vec<(Target, Reading)> {
        self.readings.read().expect("engine board lock").iter().map(|(t, r)| (t.clone(), *r)).collect()
    }

    /// Replaces `worker`'s readings with what one answer said; ranks at or past `ranks` (the
    /// record's DP size) are ignored.
    fn put(&self, worker: &WorkerId, ranks: u32, loads: Vec<(u32, EngineLoad)>, at: Instant) {
        let mut map = self.readings.write().expect("engine board lock");
        for (rank, load) in loads.into_iter().filter(|(rank, _)| *rank < ranks) {
            map.insert(Target::new(worker.clone(), DpRank(rank)), Reading { load, at });
        }
    }

    /// Drops `worker`'s readings.
    fn forget(&self, worker: &WorkerId) {
        self.readings.write().expect("engine board lock").retain(|t, _| &t.worker != worker);
    }
}

impl crate::target::KvRoom for EngineBoard {
    fn kv_use(&self, target: &Target) -> Option<crate::target::KvUse> {
        let load = self.get(target)?.load;
        (load.max_total_tokens > 0).then_some(crate::target::KvUse {
            used_tokens: load.used_tokens,
            capacity_tokens: load.max_total_tokens,
        })
    }
}

/// The pollers: one per followed worker.
#[derive(Debug)]
pub struct EngineFeed {
    board: Arc<EngineBoard>,
    /// `None`: engine readings are off.
    interval: Option<Duration>,
    pollers: Mutex<HashMap<WorkerId, JoinHandle<()>>>,
}

impl EngineFeed {
    /// A feed polling every `interval` (`None`: off, nothing is polled).
    pub fn new(interval: Option<Duration>) -> Self {
        Self { board: Arc::default(), interval, pollers: Mutex::default() }
    }

    /// The readings.
    pub fn board(&self) -> &EngineBoard {
        &self.board
    }

    /// Polls `record`'s `/v1/loads` from now on (a registered-again worker restarts its
    /// poller with the new record).
    pub fn follow(&self, record: &WorkerRecord) {
        let Some(interval) = self.interval else { return };
        let task = tokio::spawn(poll::run(record.clone(), interval, self.board.clone()));
        if let Some(old) = self.pollers.lock().expect("pollers lock").insert(record.id.clone(), task) {
            old.abort();
        }
    }

    /// Stops polling `worker` and drops its readings.
    pub fn forget(&self, worker: &WorkerId) {
        if let Some(task) = self.pollers.lock().expect("pollers lock").remove(worker) {
            task.abort();
        }
        self.board.forget(worker);
    }

    /// Stops every poller (control is stopping).
    pub fn stop(&self) {
        for (_, task) in self.pollers.lock().expect("pollers lock").drain() {
            task.abort();
        }
    }
}

impl Drop for EngineFeed {
    fn drop(&mut self) {
        self.stop();
    }
}

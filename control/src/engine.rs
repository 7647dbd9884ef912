//! Engine readings: what each worker's SGLang engine says it holds, per DP rank, read from its
//! `GET /v1/loads` on a short interval (`--engine-poll-ms`; SGLang's own router polls every
//! 100 ms) and, for a worker whose record names its load socket (`load_events`, SGLang 0.5.19+
//! `--load-publish-endpoint`), from each rank's `LoadStat` as it is published. The ledger says
//! what control booked; the readings say what the engines run and queue. `Admin/ListTargets`
//! shows both, with their difference (the drift), and so do the `infera_router_engine_*` gauges.
//!
//! - [`loads`]: the `/v1/loads` body → one [`EngineLoad`] per rank (pure).
//! - [`poll`]: one task per worker, filling the [`EngineBoard`].
//! - [`subscribe`]: one task per rank of a worker with a load socket, filling it too.
//! - [`metrics`]: the per-target gauges.
//!
//! A socket reading replaces the polled one when it is newer (a poll answer that left the
//! engine before the latest socket reading keeps that reading's counts); `LoadStat` has no
//! disaggregation queues, so those always come from the last poll (0 without polling).
//!
//! Readings live outside the routing lock: pollers write the board, readers copy from it.

pub mod loads;
pub mod metrics;
mod poll;
mod subscribe;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use infera_kv::load::LoadStat;
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
    /// Where the running and waiting counts came from.
    pub source: Source,
    /// The engine's own clock, as polled.
    pub clock: EngineClock,
}

/// A rank's own clock (the per-rank `timestamp` of `/v1/loads`, stamped by its scheduler when
/// it wrote the snapshot) as last polled, and since when control has seen it at that value.
/// SGLang's scheduler rewrites the snapshot every step and, while it holds work but runs no
/// batch, every 50 ms (0.5.23 `scheduler.py` `LOAD_STALL_REFRESH_S`); idle, it stops. So a
/// clock that stands still while the rank holds requests is a hung scheduler whose HTTP
/// server still answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineClock {
    /// The timestamp in microseconds (`None`: the answer had none).
    pub micros: Option<u64>,
    /// When control first saw it at this value.
    pub since: Instant,
}

impl EngineClock {
    /// The clock after a poll that read `micros` at `at`, `prev` being the one before.
    fn next(prev: Option<EngineClock>, micros: Option<u64>, at: Instant) -> Self {
        match prev {
            Some(p) if micros.is_some() && p.micros == micros => p,
            _ => Self { micros, since: at },
        }
    }

    /// How long it has stood still at `now` (zero for an engine that gives no clock).
    pub fn still_for(&self, now: Instant) -> Duration {
        if self.micros.is_none() { Duration::ZERO } else { now.saturating_duration_since(self.since) }
    }
}

/// How a reading reached control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// An answer of `GET /v1/loads`.
    Poll,
    /// A `LoadStat` on the rank's load socket.
    Socket,
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

    /// Replaces `worker`'s readings with what one `/v1/loads` answer said, asked at `sent`;
    /// ranks at or past `ranks` (the record's DP size) are ignored. A rank whose socket reading
    /// is newer than `sent` keeps it and takes only the queues (and the engine clock).
    fn put(&self, worker: &WorkerId, ranks: u32, answers: &[loads::RankAnswer], sent: Instant, at: Instant) {
        let mut map = self.readings.write().expect("engine board lock");
        for answer in answers.iter().filter(|a| a.rank < ranks) {
            let target = Target::new(worker.clone(), DpRank(answer.rank));
            let prev = map.get(&target);
            let clock = EngineClock::next(prev.map(|r| r.clock), answer.clock_micros, at);
            let load = answer.load;
            let reading = match prev {
                Some(r) if r.source == Source::Socket && r.at >= sent => {
                    Reading { load: with_queues(r.load, &load), clock, ..*r }
                }
                _ => Reading { load, at, source: Source::Poll, clock },
            };
            map.insert(target, reading);
        }
    }

    /// Records `target`'s socket reading, arrived `at`; the queues stay those of the last poll.
    fn put_stat(&self, target: Target, stat: &LoadStat, at: Instant) {
        let mut map = self.readings.write().expect("engine board lock");
        let prev = map.get(&target);
        let polled = prev.map(|r| r.load).unwrap_or_default();
        let clock = prev.map_or(EngineClock { micros: None, since: at }, |r| r.clock);
        let load = EngineLoad {
            running: stat.num_running_reqs,
            waiting: stat.num_waiting_reqs,
            used_tokens: stat.num_tokens,
            max_total_tokens: stat.max_total_num_tokens,
            ..with_queues(EngineLoad::default(), &polled)
        };
        map.insert(target, Reading { load, at, source: Source::Socket, clock });
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

    fn engine_requests(&self, target: &Target) -> Option<u64> {
        Some(self.get(target)?.load.holding())
    }
}

/// `load` with the disaggregation queues of `polled` (what `LoadStat` does not carry).
fn with_queues(load: EngineLoad, polled: &EngineLoad) -> EngineLoad {
    EngineLoad {
        prealloc_queue: polled.prealloc_queue,
        transfer_queue: polled.transfer_queue,
        retracted: polled.retracted,
        bootstrap_queue: polled.bootstrap_queue,
        inflight_queue: polled.inflight_queue,
        ..load
    }
}

/// The readers: per followed worker, its poller and its ranks' load-socket subscribers.
#[derive(Debug)]
pub struct EngineFeed {
    board: Arc<EngineBoard>,
    /// Each polled decode worker's fit of W, fed by its poller.
    fits: Arc<crate::fit::WeightFits>,
    /// `None`: `/v1/loads` is not polled.
    interval: Option<Duration>,
    /// How workers are reached (`https://` over TLS).
    connector: infera_runtime::serve::worker_client::WorkerConnector,
    pollers: Mutex<HashMap<WorkerId, Vec<JoinHandle<()>>>>,
}

impl EngineFeed {
    /// A feed polling every `interval` (`None`: nothing is polled, nothing is fitted; load
    /// sockets are still followed), each answer also read by `fits`.
    pub fn new(
        interval: Option<Duration>,
        fits: Arc<crate::fit::WeightFits>,
        connector: infera_runtime::serve::worker_client::WorkerConnector,
    ) -> Self {
        Self { board: Arc::default(), fits, interval, connector, pollers: Mutex::default() }
    }

    /// How workers are reached (their `/server_info` too).
    pub fn connector(&self) -> &infera_runtime::serve::worker_client::WorkerConnector {
        &self.connector
    }

    /// How often the engines are polled (`None`: never).
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// The W fits the readings feed.
    pub fn fits(&self) -> &crate::fit::WeightFits {
        &self.fits
    }

    /// The readings.
    pub fn board(&self) -> &EngineBoard {
        &self.board
    }

    /// Polls `record`'s `/v1/loads` and follows its load sockets from now on (a
    /// registered-again worker restarts its readers with the new record).
    pub fn follow(&self, record: &WorkerRecord) {
        let mut tasks = subscribe::spawn(record, &self.board);
        if let Some(interval) = self.interval {
            let (board, fits) = (self.board.clone(), self.fits.clone());
            let connector = self.connector.clone();
            tasks.push(tokio::spawn(poll::run(record.clone(), interval, board, fits, connector)));
        }
        let old = self.pollers.lock().expect("pollers lock").insert(record.id.clone(), tasks);
        old.into_iter().flatten().for_each(|task| task.abort());
    }

    /// Stops reading `worker` and drops its readings.
    pub fn forget(&self, worker: &WorkerId) {
        if let Some(tasks) = self.pollers.lock().expect("pollers lock").remove(worker) {
            tasks.iter().for_each(JoinHandle::abort);
        }
        self.board.forget(worker);
        self.fits.forget(worker);
    }

    /// Stops every reader (control is stopping).
    pub fn stop(&self) {
        for (_, tasks) in self.pollers.lock().expect("pollers lock").drain() {
            tasks.iter().for_each(JoinHandle::abort);
        }
    }
}

impl Drop for EngineFeed {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target::new(WorkerId::new("w"), DpRank(0))
    }

    fn answer(load: EngineLoad, clock_micros: Option<u64>) -> Vec<loads::RankAnswer> {
        vec![loads::RankAnswer { rank: 0, load, moments: None, clock_micros }]
    }

    #[test]
    fn the_engine_clock_counts_how_long_it_stood_still() {
        let board = EngineBoard::default();
        let w = WorkerId::new("w");
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        board.put(&w, 1, &answer(EngineLoad::default(), Some(1_000)), t0, t0);
        board.put(&w, 1, &answer(EngineLoad::default(), Some(1_000)), at(100), at(100));
        board.put(&w, 1, &answer(EngineLoad::default(), Some(1_000)), at(300), at(300));
        assert_eq!(board.get(&target()).unwrap().clock.still_for(at(300)), Duration::from_millis(300));
        // A socket reading between polls keeps the clock.
        board.put_stat(target(), &LoadStat::default(), at(350));
        assert_eq!(board.get(&target()).unwrap().clock.since, t0);
        board.put(&w, 1, &answer(EngineLoad::default(), Some(1_050)), at(400), at(400));
        assert_eq!(board.get(&target()).unwrap().clock.still_for(at(450)), Duration::from_millis(50));
        // An engine without a clock never stands still.
        board.put(&w, 1, &answer(EngineLoad::default(), None), at(500), at(500));
        board.put(&w, 1, &answer(EngineLoad::default(), None), at(900), at(900));
        assert_eq!(board.get(&target()).unwrap().clock.still_for(at(900)), Duration::ZERO);
    }

    #[test]
    fn a_newer_socket_reading_wins_and_the_queues_stay_polled() {
        let board = EngineBoard::default();
        let t0 = Instant::now();
        let polled = EngineLoad {
            running: 1,
            waiting: 2,
            prealloc_queue: 3,
            transfer_queue: 4,
            ..EngineLoad::default()
        };
        board.put(&WorkerId::new("w"), 1, &answer(polled, None), t0, t0);
        let stat =
            LoadStat { num_running_reqs: 9, num_waiting_reqs: 0, num_tokens: 50, ..LoadStat::default() };
        let t1 = t0 + Duration::from_millis(5);
        board.put_stat(target(), &stat, t1);
        let r = board.get(&target()).unwrap();
        assert_eq!((r.source, r.at), (Source::Socket, t1));
        assert_eq!((r.load.running, r.load.waiting, r.load.used_tokens), (9, 0, 50));
        assert_eq!((r.load.prealloc_queue, r.load.transfer_queue), (3, 4), "LoadStat has no queues");

        // A poll asked before the socket reading: its counts are older; only its queues count.
        let late = EngineLoad { running: 1, retracted: 7, ..EngineLoad::default() };
        board.put(&WorkerId::new("w"), 1, &answer(late, None), t0, t1 + Duration::from_millis(1));
        let r = board.get(&target()).unwrap();
        assert_eq!(
            (r.source, r.load.running, r.load.retracted, r.load.prealloc_queue),
            (Source::Socket, 9, 7, 0)
        );

        // A poll asked after it replaces it.
        let t2 = t1 + Duration::from_millis(10);
        board.put(&WorkerId::new("w"), 1, &answer(late, None), t2, t2);
        let r = board.get(&target()).unwrap();
        assert_eq!((r.source, r.load), (Source::Poll, late));
    }
}

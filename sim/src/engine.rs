//! The effectful shell around the [`Scheduler`]: one lock around the core, a driver task that
//! sleeps until the next batch or step completes (on the [`Clock`], so `--sim-speedup` and
//! paused tokio time apply), and a `watch` channel per request that handlers read progress
//! from. A [`Ticket`] is the handler's claim on its request: dropping it removes the request
//! from the engine, so every way a handler ends (finished, failed, client gone) frees the slot.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use infera_kv::publish::Publisher;
use tokio::sync::{Notify, watch};

use crate::clock::Clock;
use crate::scheduler::{Admission, Event, RankSnapshot, ReqId, Scheduler};
use crate::timing::RankLoad;

/// How a request left the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// All tokens emitted.
    Finished,
    /// Aborted (`/abort_request` or shutdown).
    Aborted,
}

/// A request's progress as its handler sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Prompt tokens found in the prefix cache, once prefilled.
    pub cached_tokens: Option<u32>,
    /// Tokens emitted so far.
    pub tokens: u32,
    /// Decode role: the rank reserved the KV (left the prealloc queue); the transfer may start.
    pub preallocated: bool,
    /// Set once the request left the engine.
    pub end: Option<End>,
}

/// The engine, shared by handlers and the driver.
#[derive(Debug, Clone)]
pub struct Engine(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    wake: Notify,
    clock: Clock,
}

#[derive(Debug)]
struct State {
    core: Scheduler,
    /// Each request's progress channel and rid.
    watchers: HashMap<ReqId, (watch::Sender<Progress>, String)>,
    rids: HashMap<String, ReqId>,
    /// Each rank's KV-event publisher (empty: none are published).
    kv: Vec<Publisher>,
    /// Set while the scheduler hangs (`hang` fault).
    hung: Option<Frozen>,
}

/// What a hung scheduler last published: its snapshot, and the wall time it was taken.
#[derive(Debug)]
struct Frozen {
    ranks: Vec<RankSnapshot>,
    at: SystemTime,
}

impl State {
    /// Makes model time pass up to `now`: what is due, unless the scheduler hangs.
    fn step(&mut self, now: std::time::Duration) -> Vec<Event> {
        if self.hung.is_some() { Vec::new() } else { self.core.advance(now) }
    }

    /// Hands the core's progress events to the handlers and its KV-event batches to the
    /// publishers (under the state lock: each rank's batches keep their step order).
    fn dispatch(&mut self, events: Vec<Event>) {
        self.publish_kv();
        for event in events {
            match event {
                Event::Prefilled { id, cached_tokens } => {
                    self.update(id, |p| p.cached_tokens = Some(cached_tokens))
                }
                Event::Tokens { id, total } => self.update(id, |p| p.tokens = total),
                Event::Finished { id } => self.end(id, End::Finished),
                Event::Preallocated { id } => self.update(id, |p| p.preallocated = true),
                Event::Aborted { id } => self.end(id, End::Aborted),
            }
        }
    }

    fn publish_kv(&mut self) {
        if self.kv.is_empty() {
            return;
        }
        for (rank, events) in self.core.take_kv_batches() {
            if let Some(Err(e)) = self.kv.get(rank).map(|p| p.publish(events)) {
                tracing::warn!(rank, error = %e, "KV events not published");
            }
        }
    }

    fn update(&self, id: ReqId, f: impl FnOnce(&mut Progress)) {
        if let Some((tx, _)) = self.watchers.get(&id) {
            tx.send_modify(f);
        }
    }

    fn end(&mut self, id: ReqId, end: End) {
        if let Some((tx, rid)) = self.watchers.remove(&id) {
            tx.send_modify(|p| p.end = Some(end));
            if self.rids.get(&rid) == Some(&id) {
                self.rids.remove(&rid);
            }
        }
    }
}

impl Engine {
    /// An engine over `core`, on `clock`. Call [`Engine::drive`] to make time pass.
    pub fn new(core: Scheduler, clock: Clock) -> Self {
        Self::with_kv_events(core, clock, Vec::new())
    }

    /// An engine whose prefix-cache changes rank `r` publishes on `publishers[r]` (none when
    /// empty).
    pub fn with_kv_events(mut core: Scheduler, clock: Clock, publishers: Vec<Publisher>) -> Self {
        if !publishers.is_empty() {
            core.record_kv_events();
        }
        let state =
            State { core, watchers: HashMap::new(), rids: HashMap::new(), kv: publishers, hung: None };
        Self(Arc::new(Inner { state: Mutex::new(state), wake: Notify::new(), clock }))
    }

    /// The model-time clock (`--sim-speedup`) the engine paces by.
    pub fn clock(&self) -> Clock {
        self.0.clock
    }

    /// Takes a request in now, under `rid` (for `/abort_request`).
    pub fn submit(&self, rid: &str, admission: Admission) -> Ticket {
        let mut st = self.0.state.lock().unwrap();
        let now = self.0.clock.now();
        let events = st.step(now);
        st.dispatch(events);
        let id = st.core.submit(now, admission);
        let (tx, rx) = watch::channel(Progress::default());
        st.watchers.insert(id, (tx, rid.to_owned()));
        st.rids.insert(rid.to_owned(), id);
        // Hands out what the admission raised (a reservation, an abort).
        let events = st.step(now);
        st.dispatch(events);
        drop(st);
        self.0.wake.notify_one();
        Ticket { engine: self.clone(), id, rx }
    }

    /// Aborts the request with `rid`; whether it was in the engine.
    pub fn abort_rid(&self, rid: &str) -> bool {
        let id = self.0.state.lock().unwrap().rids.get(rid).copied();
        id.is_some_and(|id| self.abort(id))
    }

    /// Aborts every request; how many there were.
    pub fn abort_all(&self) -> usize {
        let ids = self.0.state.lock().unwrap().core.ids();
        ids.into_iter().filter(|&id| self.abort(id)).count()
    }

    fn abort(&self, id: ReqId) -> bool {
        let mut st = self.0.state.lock().unwrap();
        let found = st.core.remove(id);
        st.end(id, End::Aborted);
        // The freed KV may admit or resume others now.
        let events = st.step(self.0.clock.now());
        st.dispatch(events);
        drop(st);
        self.0.wake.notify_one();
        found
    }

    /// Per-rank counters (while the scheduler hangs: the last it published).
    pub fn snapshot(&self) -> Vec<RankSnapshot> {
        let st = self.0.state.lock().unwrap();
        match &st.hung {
            Some(frozen) => frozen.ranks.clone(),
            None => st.core.snapshot(),
        }
    }

    /// When the snapshot was taken: now, or when the scheduler hung.
    pub fn snapshot_time(&self) -> SystemTime {
        self.0.state.lock().unwrap().hung.as_ref().map_or_else(SystemTime::now, |f| f.at)
    }

    /// Whether the scheduler hangs.
    pub fn hung(&self) -> bool {
        self.0.state.lock().unwrap().hung.is_some()
    }

    /// Hangs the scheduler (`true`) or lets it go on (`false`: what came due meanwhile runs at
    /// once, as a scheduler that came back would).
    pub fn set_hung(&self, hang: bool) {
        let mut st = self.0.state.lock().unwrap();
        match (hang, st.hung.is_some()) {
            (true, false) => {
                let ranks = st.core.snapshot();
                st.hung = Some(Frozen { ranks, at: SystemTime::now() });
            }
            (false, true) => st.hung = None,
            _ => return,
        }
        drop(st);
        self.0.wake.notify_one();
    }

    /// Per-rank decode loads (the step formula's inputs).
    pub fn rank_loads(&self) -> Vec<RankLoad> {
        self.0.state.lock().unwrap().core.rank_loads()
    }

    /// Empties the prefix caches.
    pub fn flush_cache(&self) {
        let mut st = self.0.state.lock().unwrap();
        st.core.flush_cache();
        st.publish_kv();
    }

    /// Makes model time pass until `stop` resolves: processes what is due, then sleeps until
    /// the next completion or a new request.
    pub async fn drive(self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        loop {
            let next = {
                let mut st = self.0.state.lock().unwrap();
                let events = st.step(self.0.clock.now());
                st.dispatch(events);
                // A hung scheduler waits to be woken (by `set_hung`).
                if st.hung.is_some() { None } else { st.core.next_deadline() }
            };
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(self.0.clock.at(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut stop => return,
                _ = self.0.wake.notified() => {}
                _ = sleep => {}
            }
        }
    }
}

/// A handler's claim on its request; dropping it removes the request from the engine.
#[derive(Debug)]
pub struct Ticket {
    engine: Engine,
    id: ReqId,
    rx: watch::Receiver<Progress>,
}

impl Ticket {
    /// The progress now.
    pub fn progress(&self) -> Progress {
        self.rx.borrow().clone()
    }

    /// Waits for the next change of progress and returns it. A request that left the engine
    /// without saying how reads as aborted.
    pub async fn next(&mut self) -> Progress {
        if self.rx.changed().await.is_err() {
            let mut p = self.rx.borrow().clone();
            p.end.get_or_insert(End::Aborted);
            return p;
        }
        self.rx.borrow_and_update().clone()
    }

    /// Removes the request from the engine now (the end of a prefill leg's transfer hold).
    pub fn finish(&self) {
        self.engine.abort(self.id);
    }

    /// A decode-role request's KV arrived, with the prefill's cached-token count.
    pub fn kv_arrived(&self, cached_tokens: u32) {
        let inner = &self.engine.0;
        let mut st = inner.state.lock().unwrap();
        let now = inner.clock.now();
        let events = st.step(now);
        st.dispatch(events);
        let events = st.core.kv_arrived(now, self.id, cached_tokens);
        st.dispatch(events);
        drop(st);
        inner.wake.notify_one();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.engine.abort(self.id);
    }
}

//! The engine's pure core: prefill queues per DP rank and decode steps in lockstep over all
//! ranks. No tasks, no clock: every call takes the model time `now`, and [`Scheduler::advance`]
//! processes everything due by then, each at its own due time, so results do not depend on how
//! late the shell wakes up.
//!
//! A request's life: `Waiting` (prefill queue) → in a prefill batch, chunk by chunk →
//! prefilled (pages enter the rank's prefix cache) → first token → `Running` (one decode step
//! adds `mtp_acceptance` tokens, emitted as whole tokens) → finished at `max_new_tokens`.
//! PD variants: a prefill-role request stops after its first token in `Transfer` until the
//! shell ends it; a decode-role request starts in `Transfer` and joins at its first token
//! when its KV arrives. The stall fault parks a request in `stalled` after K tokens.
//!
//! With [`Scheduler::record_kv_events`], every completed prefill batch (one scheduler step of a
//! rank) that changed the rank's prefix cache leaves one batch of SGLang KV events, and a cache
//! flush leaves `AllBlocksCleared` on every rank; the shell takes them with
//! [`Scheduler::take_kv_batches`] and publishes them.

mod decode_mem;
pub mod kv;
pub mod moments;
mod prefill;
mod rank;
mod req;
mod snapshot;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_kv;
mod types;

use std::collections::HashMap;
use std::time::Duration;

pub use kv::KvBudget;
use prefill::cached_of;
pub use rank::QueueOrder;
use rank::{Batch, Rank, Waiting};
use req::{Phase, Req};
pub use types::{Admission, Event, RankSnapshot, ReqId, Work};

use infera_kv::event::KvEvent;

use crate::params::TimingParams;
use crate::prefix_cache::{PrefixCache, PromptPages};
use crate::timing;

/// The decode step in flight.
#[derive(Debug)]
struct Step {
    ends: Duration,
    members: Vec<ReqId>,
    /// Each rank's decode batch launch (SGLang's moment record), by rank.
    launches: Vec<moments::Launch>,
}

/// Prefill queues per rank and lockstep decode: the pure engine.
#[derive(Debug)]
pub struct Scheduler {
    params: TimingParams,
    chunk: u32,
    /// `--page-size`: the unit a shortened chunk is rounded to.
    page_size: u32,
    order: QueueOrder,
    ranks: Vec<Rank>,
    reqs: HashMap<ReqId, Req>,
    step: Option<Step>,
    next_id: u64,
    /// Whether cache changes are recorded as KV events.
    kv_events: bool,
    /// Recorded KV-event batches, `(rank, events)`, oldest first.
    kv_batches: Vec<(usize, Vec<KvEvent>)>,
    /// Each rank's KV budget (decode role).
    kv: KvBudget,
    /// Events raised outside a completion (reservations, aborts), handed out by the next
    /// [`Scheduler::advance`].
    outbox: Vec<Event>,
    /// Decode steps so far (the decode log's interval counts them).
    decode_steps: u64,
    /// Whether requests here await their KV from a prefill (a PD decode).
    decode_role: bool,
    /// When the last decode step ended (a step starting then is back to back with it).
    last_step_end: Option<Duration>,
}

impl Scheduler {
    /// An idle engine with `ranks` DP ranks.
    pub fn new(params: TimingParams, ranks: usize, chunk: u32, page_size: u32, order: QueueOrder) -> Self {
        let cache = PrefixCache::new(page_size, params.prefix_cache_tokens);
        Self {
            ranks: (0..ranks.max(1)).map(|_| Rank::new(cache.clone())).collect(),
            params,
            chunk: chunk.max(1),
            page_size: page_size.max(1),
            order,
            reqs: HashMap::new(),
            step: None,
            next_id: 0,
            kv_events: false,
            kv_batches: Vec::new(),
            kv: KvBudget::default(),
            outbox: Vec::new(),
            decode_steps: 0,
            decode_role: false,
            last_step_end: None,
        }
    }

    /// Bounds each rank's KV for decode-role requests (`--max-total-tokens`).
    pub fn with_kv_budget(mut self, kv: KvBudget) -> Self {
        self.kv = kv;
        self
    }

    /// Records prefix-cache changes as SGLang KV events from now on.
    pub fn record_kv_events(&mut self) {
        self.kv_events = true;
    }

    /// The KV-event batches recorded since the last call, `(rank, events)`, in step order.
    pub fn take_kv_batches(&mut self) -> Vec<(usize, Vec<KvEvent>)> {
        std::mem::take(&mut self.kv_batches)
    }

    /// The number of DP ranks.
    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Takes a request in at `now` (call [`Scheduler::advance`] up to `now` first) and
    /// returns its id (ids count up from 0).
    pub fn submit(&mut self, now: Duration, a: Admission) -> ReqId {
        let id = ReqId(self.next_id);
        self.next_id += 1;
        let rank = a.rank.min(self.ranks.len() - 1);
        let (pages, hold, phase) = match a.work {
            Work::Prefill { pages, hold } => (pages, hold, Phase::Waiting),
            Work::AwaitKv => (PromptPages::default(), false, Phase::Prealloc),
        };
        let prompt_tokens = a.prompt_tokens.max(1);
        let req = Req {
            rank,
            prompt_tokens,
            max_new: a.max_new_tokens,
            stall_after: a.stall_after,
            hold,
            phase,
            cached: 0,
            remaining: 0,
            emitted: 0,
            steps: 0,
            pages,
        };
        let r = &mut self.ranks[rank];
        match req.phase {
            Phase::Prealloc => {
                self.decode_role = true;
                if !self.enter_prealloc(id, rank, prompt_tokens) {
                    return id;
                }
            }
            _ => {
                let cached = cached_of(&r.cache, &req.pages.hashes, prompt_tokens);
                r.waiting.push_back(Waiting {
                    id,
                    estimate: prompt_tokens - cached,
                    arrived_at_processed: r.processed,
                });
            }
        }
        self.reqs.insert(id, req);
        self.start_work(now);
        id
    }

    /// A decode-role request's KV arrived at `now` (with `cached_tokens` reported by the
    /// prefill): it emits its first token and joins the decode set.
    pub fn kv_arrived(&mut self, now: Duration, id: ReqId, cached_tokens: u32) -> Vec<Event> {
        let mut events = Vec::new();
        let Some(req) = self.reqs.get_mut(&id) else { return events };
        if !matches!(req.phase, Phase::Transfer) {
            return events;
        }
        req.cached = cached_tokens;
        let rank = req.rank;
        self.ranks[rank].transfer.retain(|&r| r != id);
        self.first_token(id, &mut events);
        self.start_work(now);
        events
    }

    /// Removes a request wherever it is (abort, client gone, end of a held transfer).
    /// Returns whether it was in the engine.
    pub fn remove(&mut self, id: ReqId) -> bool {
        let Some(req) = self.reqs.remove(&id) else { return false };
        self.ranks[req.rank].forget(id);
        true
    }

    /// Every request id in the engine.
    pub fn ids(&self) -> Vec<ReqId> {
        let mut ids: Vec<ReqId> = self.reqs.keys().copied().collect();
        ids.sort();
        ids
    }

    /// Processes everything due by `now`, in time order, then starts what can start at `now`
    /// (after a removal freed KV, say). Also hands out the events raised in between.
    pub fn advance(&mut self, now: Duration) -> Vec<Event> {
        let mut events = std::mem::take(&mut self.outbox);
        while let Some((at, what)) = self.next_due().filter(|(at, _)| *at <= now) {
            match what {
                Due::Step => self.end_step(at, &mut events),
                Due::Batch(rank) => self.end_batch(at, rank, &mut events),
            }
            self.start_work(at);
            events.append(&mut self.outbox);
        }
        self.start_work(now);
        events.append(&mut self.outbox);
        events
    }

    /// When the next batch or step completes, if anything is in flight.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.next_due().map(|(at, _)| at)
    }

    /// Empties every rank's prefix cache.
    pub fn flush_cache(&mut self) {
        for (rank, r) in self.ranks.iter_mut().enumerate() {
            r.cache.clear();
            if self.kv_events {
                self.kv_batches.push((rank, vec![KvEvent::AllBlocksCleared]));
            }
        }
    }

    fn next_due(&self) -> Option<(Duration, Due)> {
        let step = self.step.as_ref().map(|s| (s.ends, Due::Step));
        let batches = self
            .ranks
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.batch.as_ref().map(|b| (b.ends, Due::Batch(i))));
        step.into_iter().chain(batches).min_by_key(|(at, due)| (*at, due.order()))
    }

    /// Starts a prefill batch on every idle rank with queued work, and a decode step if none
    /// is in flight and any rank has running requests.
    fn start_work(&mut self, now: Duration) {
        for rank in 0..self.ranks.len() {
            self.admit_decode(rank);
            if self.ranks[rank].batch.is_none() {
                self.start_batch(now, rank);
            }
        }
        if self.step.is_none() {
            for rank in 0..self.ranks.len() {
                self.retract_for_step(rank);
            }
        }
        if self.step.is_none() && self.ranks.iter().any(|r| !r.running.is_empty()) {
            let ms = timing::step_ms(&self.params, &self.rank_loads());
            let members = self.ranks.iter().flat_map(|r| r.running.iter().copied()).collect();
            // Back to back with the previous step when it ended now; a rank idle in that step,
            // or with a prefill batch in flight, starts a new run.
            let back_to_back = self.last_step_end == Some(now);
            let launches = self
                .ranks
                .iter_mut()
                .map(|r| {
                    let batch = r.running.len() as u32;
                    let contiguous = back_to_back && r.batch.is_none();
                    if batch == 0 || r.batch.is_some() {
                        r.moments.gap();
                    }
                    r.moments.launch(now, batch, contiguous)
                })
                .collect();
            self.step = Some(Step { ends: now + timing::ms(ms), members, launches });
        } else if self.step.is_none() {
            for r in &mut self.ranks {
                r.moments.gap();
            }
        }
    }

    /// The token a prefill (or an arrived KV) yields; then decode, hold, stall or finish.
    fn first_token(&mut self, id: ReqId, events: &mut Vec<Event>) {
        let Some(req) = self.reqs.get_mut(&id) else { return };
        let rank = req.rank;
        if req.max_new > 0 && req.stall_after != Some(0) {
            req.emitted = 1;
            events.push(Event::Tokens { id, total: 1 });
        }
        self.place(id, rank, events);
    }

    /// Puts a request that just emitted tokens where it belongs next.
    fn place(&mut self, id: ReqId, rank: usize, events: &mut Vec<Event>) {
        let Some(req) = self.reqs.get_mut(&id) else { return };
        let r = &mut self.ranks[rank];
        r.running.retain(|&x| x != id);
        if req.stall_after.is_some_and(|k| req.emitted >= k && req.emitted < req.max_new) {
            req.phase = Phase::Stalled;
            r.stalled.push(id);
        } else if req.hold {
            req.phase = Phase::Transfer;
            r.transfer.push(id);
        } else if req.emitted >= req.max_new {
            self.reqs.remove(&id);
            events.push(Event::Finished { id });
        } else {
            req.phase = Phase::Running;
            r.running.push(id);
        }
    }

    fn end_step(&mut self, at: Duration, events: &mut Vec<Event>) {
        let Some(step) = self.step.take() else { return };
        self.log_decode_step();
        self.last_step_end = Some(at);
        let acceptance = self.params.mtp_acceptance;
        let mut generated = vec![0u64; self.ranks.len()];
        for id in step.members {
            let Some(req) = self.reqs.get_mut(&id) else { continue };
            if !matches!(req.phase, Phase::Running) {
                continue;
            }
            req.steps += 1;
            // Integer steps times the acceptance: no drift from summing fractions.
            let target = 1 + (f64::from(req.steps) * acceptance + 1e-9).floor() as u32;
            let cap = req.max_new.min(req.stall_after.unwrap_or(u32::MAX));
            let total = target.min(cap);
            if total > req.emitted {
                generated[req.rank] += u64::from(total - req.emitted);
                req.emitted = total;
                events.push(Event::Tokens { id, total });
            }
            let (rank, done) = (req.rank, req.emitted >= cap);
            if done {
                self.place(id, rank, events);
            }
        }
        for ((rank, launch), generated) in self.ranks.iter_mut().zip(step.launches).zip(generated) {
            rank.moments.result(launch, generated);
        }
    }
}

/// What completes next.
#[derive(Debug, Clone, Copy)]
enum Due {
    Step,
    Batch(usize),
}

impl Due {
    /// Tie order at equal times: the step first, then ranks in order.
    fn order(self) -> usize {
        match self {
            Due::Step => 0,
            Due::Batch(r) => r + 1,
        }
    }
}

//! A decode rank's KV budget in motion: the prealloc queue (a PD request waits there until
//! its KV can be reserved, then its transfer starts), the retracted queue, and retraction when
//! the running batch's next step does not fit. SGLang 0.5.23:
//! `python/sglang/srt/disaggregation/decode.py` (`DecodePreallocQueue.pop_preallocated`,
//! `resume_retracted_reqs`, `Scheduler.process_decode_queue`) and
//! `python/sglang/srt/managers/schedule_batch.py` (`check_decode_mem`, `retract_decode`).
//!
//! Assumed, not timed: the retracted request's KV goes to host memory and comes back on
//! resume (SGLang's inferred `--disaggregation-decode-retraction-backup`, a per-request CPU
//! tensor); the copies take no model time here.

use super::Scheduler;
use super::kv::{KvReq, RankKv, retraction_order};
use super::rank::Rank;
use super::req::{Phase, Req};
use super::types::{Event, ReqId};

/// SGLang's `--decode-log-interval` default (0.5.23 `python/sglang/srt/server_args.py`): the
/// decode log, which is where `queues.retracted` is refreshed, runs every this many steps.
pub(super) const DECODE_LOG_INTERVAL: u64 = 40;

impl Scheduler {
    /// KV a rank holds: requests transferring, decoding, stalled or in the prefill batch.
    pub(super) fn used(&self, r: &Rank) -> u64 {
        let batch = r.batch.iter().flat_map(|b| b.parts.iter().map(|(id, _)| id));
        r.running
            .iter()
            .chain(&r.stalled)
            .chain(&r.transfer)
            .chain(batch)
            .filter_map(|id| self.reqs.get(id))
            .map(Req::context)
            .sum()
    }

    fn kv_of(&self, ids: impl IntoIterator<Item = ReqId>) -> Vec<KvReq> {
        ids.into_iter().filter_map(|id| self.reqs.get(&id)).map(Req::kv).collect()
    }

    /// The rank's budget state now (running includes stalled requests: they hold their slot).
    fn budget_of(&self, rank: usize, capacity: u64, f: impl FnOnce(RankKv<'_>) -> bool) -> bool {
        let r = &self.ranks[rank];
        let running = self.kv_of(r.running.iter().chain(&r.stalled).copied());
        let retracted = self.kv_of(r.retracted.iter().copied());
        let active = (r.running.len() + r.stalled.len() + r.transfer.len()) as u32;
        f(RankKv { capacity, used: self.used(r), active, running: &running, retracted: &retracted })
    }

    /// A decode-role request enters the prealloc queue; one whose prompt alone exceeds the
    /// capacity is aborted (`_check_if_req_exceed_kv_capacity`).
    pub(super) fn enter_prealloc(&mut self, id: ReqId, rank: usize, prompt_tokens: u32) -> bool {
        if self.kv.capacity.is_some_and(|c| u64::from(prompt_tokens) > c) {
            self.outbox.push(Event::Aborted { id });
            return false;
        }
        self.ranks[rank].prealloc.push_back(id);
        true
    }

    /// `process_decode_queue`: resumes retracted requests in order while they fit; only when
    /// none is left, moves prealloc-queue requests to the transfer in order while they fit.
    pub(super) fn admit_decode(&mut self, rank: usize) {
        let reserved = self.kv.reserved_decode_tokens;
        while let Some(&id) = self.ranks[rank].retracted.front() {
            let Some(req) = self.reqs.get(&id).map(Req::kv) else { break };
            if let Some(c) = self.kv.capacity
                && !self.budget_of(rank, c, |b| b.resumes(req, reserved))
            {
                return;
            }
            self.ranks[rank].retracted.pop_front();
            if let Some(req) = self.reqs.get_mut(&id) {
                req.phase = Phase::Running;
            }
            self.ranks[rank].running.push(id);
        }
        while let Some(&id) = self.ranks[rank].prealloc.front() {
            let Some(req) = self.reqs.get(&id).map(Req::kv) else { break };
            if let Some(c) = self.kv.capacity
                && !self.budget_of(rank, c, |b| b.admits(req, reserved))
            {
                return;
            }
            self.ranks[rank].prealloc.pop_front();
            if let Some(req) = self.reqs.get_mut(&id) {
                req.phase = Phase::Transfer;
            }
            self.ranks[rank].transfer.push(id);
            self.outbox.push(Event::Preallocated { id });
        }
    }

    /// `update_running_batch`: if the next step's new tokens do not fit, retracts requests in
    /// SGLang's order (at least one, never the last) until they do; if even the last one does
    /// not fit, aborts it.
    pub(super) fn retract_for_step(&mut self, rank: usize) {
        let Some(capacity) = self.kv.capacity else { return };
        // One token per request and step without speculation; with it, the accepted tokens.
        let per_req = self.params.mtp_acceptance.ceil().max(1.0) as u64;
        let fits = |s: &Self, n: usize| s.used(&s.ranks[rank]) + per_req * n as u64 <= capacity;
        let n = self.ranks[rank].running.len();
        if n == 0 || fits(self, n) {
            return;
        }
        let running: Vec<ReqId> = self.ranks[rank].running.clone();
        let mut order = retraction_order(&self.kv_of(running.iter().copied())).into_iter();
        let mut left = n;
        let mut retracted = 0;
        while left > 1 && (retracted == 0 || !fits(self, left)) {
            let Some(id) = order.next().map(|i| running[i]) else { break };
            self.ranks[rank].running.retain(|&x| x != id);
            if let Some(req) = self.reqs.get_mut(&id) {
                req.phase = Phase::Retracted;
            }
            self.ranks[rank].retracted.push_back(id);
            left -= 1;
            retracted += 1;
        }
        if left == 1 && !fits(self, 1) {
            let last = self.ranks[rank].running[0];
            self.remove(last);
            self.outbox.push(Event::Aborted { id: last });
        }
        // `metrics_reporter.num_retracted_reqs = len(retracted_reqs)`: the last retraction only.
        self.ranks[rank].retracted_pending = retracted;
    }

    /// After each decode step: every [`DECODE_LOG_INTERVAL`] steps the decode log takes the
    /// retraction count and clears it (`log_decode_stats`).
    pub(super) fn log_decode_step(&mut self) {
        self.decode_steps += 1;
        if self.decode_steps.is_multiple_of(DECODE_LOG_INTERVAL) {
            for r in &mut self.ranks {
                r.retracted_logged = std::mem::take(&mut r.retracted_pending);
            }
        }
    }
}

//! A decode rank's KV capacity, as SGLang's PD decode budgets it (SGLang 0.5.23,
//! `python/sglang/srt/disaggregation/decode.py`, `DecodePreallocQueue`): the reservation a
//! request needs before its KV may be transferred, what a rank can still hand out, and the
//! order in which a full running batch gives requests back (`python/sglang/srt/managers/
//! schedule_batch.py`, `ScheduleBatch.retract_decode`). Pure arithmetic; the scheduler holds
//! the queues.
//!
//! The model is SGLang's with page size 1, no decode-side radix cache, no SWA/HiCache pools.

/// `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`'s default (SGLang 0.5.23 `python/sglang/srt/environ.py`):
/// the most output tokens a reservation counts for one request.
pub const CLIP_MAX_NEW_TOKENS: u32 = 4096;

/// `--num-reserved-decode-tokens`' default (SGLang 0.5.23
/// `python/sglang/srt/arg_groups/fields/disagg.py`).
pub const DEFAULT_RESERVED_DECODE_TOKENS: u32 = 512;

/// A rank's KV budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvBudget {
    /// `--max-total-tokens`: KV tokens per rank; `None` is unbounded (no prealloc wait, no
    /// retraction).
    pub capacity: Option<u64>,
    /// `--num-reserved-decode-tokens`: decode headroom reserved per active request.
    pub reserved_decode_tokens: u32,
}

impl Default for KvBudget {
    fn default() -> Self {
        Self { capacity: None, reserved_decode_tokens: DEFAULT_RESERVED_DECODE_TOKENS }
    }
}

/// One request as the budget sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvReq {
    /// Prompt tokens (`len(origin_input_ids)`).
    pub prompt: u32,
    /// Tokens generated so far (`len(output_ids)`).
    pub output: u32,
    /// `sampling_params.max_new_tokens`.
    pub max_new: u32,
}

impl KvReq {
    /// Tokens `_pre_alloc` writes: the prompt plus the outputs whose KV exists (all but the
    /// last sampled token; `_pre_alloc_fill_len`).
    pub fn fill(self) -> i64 {
        i64::from(self.prompt) + i64::from(self.output.saturating_sub(1))
    }

    /// `_prealloc_required_tokens`: the fill plus the reserved decode tokens.
    pub fn required(self, reserved: u32) -> i64 {
        self.fill() + i64::from(reserved)
    }

    /// Prompt plus the clipped output budget.
    fn whole(self) -> i64 {
        i64::from(self.prompt) + i64::from(self.max_new.min(CLIP_MAX_NEW_TOKENS))
    }
}

/// The rank's state a reservation is priced against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankKv<'a> {
    /// Capacity in tokens.
    pub capacity: u64,
    /// KV held now (transferring and decoding requests).
    pub used: u64,
    /// Requests holding reservations: running, transferring and admitted this round
    /// (`_active_req_count`).
    pub active: u32,
    /// The running batch (`scheduler.running_batch.reqs`).
    pub running: &'a [KvReq],
    /// The retracted queue, waiting to resume.
    pub retracted: &'a [KvReq],
}

impl RankKv<'_> {
    /// `sum(len(origin_input_ids) + len(output_ids))` over the running batch.
    pub fn retractable(&self) -> i64 {
        self.running.iter().map(|r| i64::from(r.prompt) + i64::from(r.output)).sum()
    }

    /// `_allocatable_token_budgets`: free tokens less the decode reservation of every active
    /// request (or one running request's whole budget beyond what retraction can free, if
    /// larger), less the retracted queue's reservations when `count_retracted`.
    pub fn allocatable(&self, reserved: u32, count_retracted: bool) -> i64 {
        let free = self.capacity as i64 - self.used as i64;
        let held = i64::from(reserved) * i64::from(self.active);
        // resume_retracted_reqs passes no retractable_tokens: no single-request term then.
        let single = match count_retracted {
            true => self.running.iter().map(|r| r.whole() - self.retractable()).max().unwrap_or(0),
            false => 0,
        };
        let retracted: i64 = match count_retracted {
            true => self.retracted.iter().map(|r| r.required(reserved)).sum(),
            false => 0,
        };
        free - held.max(single) - retracted
    }

    /// `_required_admission_tokens` for a new request: its fill plus the reserved decode
    /// tokens, or its whole budget less what retraction can free, whichever is more.
    pub fn admission_required(&self, req: KvReq, reserved: u32) -> i64 {
        req.required(reserved).max(req.whole() - self.retractable())
    }

    /// Whether a new request may leave the prealloc queue now (`pop_preallocated`).
    pub fn admits(&self, req: KvReq, reserved: u32) -> bool {
        self.admission_required(req, reserved) <= self.allocatable(reserved, true)
    }

    /// Whether a retracted request may resume now (`resume_retracted_reqs`).
    pub fn resumes(&self, req: KvReq, reserved: u32) -> bool {
        req.required(reserved) <= self.allocatable(reserved, false)
    }
}

/// Indices of `running` in the order `retract_decode` gives them back: the fewest generated
/// tokens first, among equals the longest prompt (`_get_decode_retraction_order` sorts by
/// `(len(output_ids), -len(origin_input_ids))` descending and pops from the end). Ties beyond
/// that go latest-joined first (Python's stable sort keeps join order; popping takes the last).
pub fn retraction_order(running: &[KvReq]) -> Vec<usize> {
    let mut keep: Vec<usize> = (0..running.len()).collect();
    keep.sort_by_key(|&i| std::cmp::Reverse((running[i].output, std::cmp::Reverse(running[i].prompt))));
    keep.reverse();
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(prompt: u32, output: u32, max_new: u32) -> KvReq {
        KvReq { prompt, output, max_new }
    }

    #[test]
    fn an_empty_rank_reserves_the_prompt_plus_the_decode_headroom() {
        let rank = RankKv { capacity: 4096, used: 0, active: 0, running: &[], retracted: &[] };
        assert_eq!(rank.allocatable(512, true), 4096);
        assert_eq!(rank.admission_required(req(1000, 0, 100), 512), 1512);
        // A long output budget counts in full (clipped at 4096) while nothing can be retracted.
        assert_eq!(rank.admission_required(req(1000, 0, 9000), 512), 5096);
        assert!(!rank.admits(req(1000, 0, 9000), 512));
        // The second request sees the first's KV and reservation.
        let rank = RankKv { used: 1000, active: 1, ..rank };
        assert_eq!(rank.allocatable(512, true), 4096 - 1000 - 512);
        assert!(rank.admits(req(1000, 0, 100), 512));
        let rank = RankKv { used: 2000, active: 2, ..rank };
        assert_eq!(rank.allocatable(512, true), 4096 - 2000 - 1024);
        assert!(!rank.admits(req(1000, 0, 100), 512));
    }

    #[test]
    fn retracted_requests_are_priced_first() {
        let retracted = [req(1000, 11, 100)];
        let rank = RankKv { capacity: 8192, used: 0, active: 0, running: &[], retracted: &retracted };
        assert_eq!(retracted[0].fill(), 1010);
        assert_eq!(rank.allocatable(512, true), 8192 - 1522);
        assert_eq!(rank.allocatable(512, false), 8192);
        assert!(rank.resumes(retracted[0], 512));
    }

    #[test]
    fn a_running_batch_can_free_what_it_holds() {
        let running = [req(1000, 50, 100), req(500, 10, 100)];
        let rank = RankKv { capacity: 4096, used: 1560, active: 2, running: &running, retracted: &[] };
        assert_eq!(rank.retractable(), 1560);
        // Whole budgets (1100, 600) less 1560 are negative: the reservation term wins.
        assert_eq!(rank.allocatable(512, true), 4096 - 1560 - 1024);
        assert_eq!(rank.admission_required(req(3000, 0, 10), 512), 3512);
        // A long budget counts beyond what retracting the batch would free.
        assert_eq!(rank.admission_required(req(3000, 0, 4000), 512), 7000 - 1560);
    }

    #[test]
    fn retraction_takes_the_youngest_output_then_the_longest_prompt() {
        let running = [req(100, 5, 50), req(900, 2, 50), req(100, 2, 50), req(300, 9, 50)];
        assert_eq!(retraction_order(&running), [1, 2, 0, 3]);
    }
}

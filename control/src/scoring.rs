//! Scoring and selection: pure functions over the eligible candidates of one pool.
//!
//! Decode cost (`manual/features/decode_balancing.md`), computed once per candidate ([`score`])
//! and logged term by term:
//!
//! ```text
//! cost(target) = booked_input_tokens(target) + request_tokens + W × held_requests(target)
//! ```
//!
//! The incoming request is not in its own held term: `held_requests` is what the target held
//! before this pick. Prefill cost is the in-flight prefill load less the overlap credit,
//! `booked_input_tokens + request_tokens - C × cached_tokens`, where `cached_tokens` is what the
//! KV prefix index says the target already holds of this prompt (zero without a tokenizer or KV
//! events) and C is `--prefill-overlap-credit` (`manual/features/kv_aware_routing.md`); session
//! affinity keeps a session on its previous prefill target unless that target costs more than the
//! cheapest by the slack.

use std::borrow::Borrow;

use infera_proto::types::{DecodePolicy, PickKind, RequestWeight};
use rand::Rng;

use crate::settings::{OverlapCredit, PrefillingWeight, Settings};
use crate::target::{Load, TargetKey, WeightedPrefilling};

mod choose;
mod round_robin;
#[cfg(test)]
mod tests;

pub use choose::{Choice, choose_decode, choose_prefill};
pub use round_robin::{PoolCursor, PoolId, PoolRef, RoundRobin};

/// One eligible candidate of a pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// The target's key.
    pub key: TargetKey,
    /// Its position in the pool (for round-robin).
    pub position: usize,
    /// What it holds before this pick.
    pub load: Load,
    /// Tokens per KV page of the target's worker.
    pub page_size: u32,
    /// Prefill: the prompt's leading pages the KV index says the target holds.
    pub overlap_pages: u32,
    /// Prefill: the prompt tokens those pages cover (at most the request's tokens).
    pub cached_tokens: u64,
    /// Decode: `load.prefilling` weighed by age (equal to it without the age decay).
    pub prefilling: WeightedPrefilling,
    /// Ejected and half-open: a pick of it is its one probe.
    pub probe: bool,
    /// Decode with `least-running`: the requests its engine reports holding (`None`: no reading).
    pub engine_requests: Option<u64>,
}

impl Candidate {
    /// A candidate with no KV overlap (yet).
    pub fn new(key: TargetKey, position: usize, load: Load, page_size: u32) -> Self {
        let prefilling = load.prefilling.into();
        Self {
            key,
            position,
            load,
            page_size,
            overlap_pages: 0,
            cached_tokens: 0,
            prefilling,
            probe: false,
            engine_requests: None,
        }
    }
}

/// A candidate with its cost for this pick, computed once: the choice, the shadow comparison and
/// the decision record all read this value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    /// The candidate as the view and the KV index described it.
    pub candidate: Candidate,
    /// Its cost ([`decode_cost`] or [`prefill_cost`], by the pick's kind).
    pub cost: f64,
}

impl Borrow<Candidate> for Scored {
    fn borrow(&self) -> &Candidate {
        &self.candidate
    }
}

/// Scores every candidate of a pick of `kind` for `request_tokens` under `settings` into `out`
/// (cleared first), in the same order.
pub fn score(
    kind: PickKind,
    settings: &Settings,
    request_tokens: u64,
    candidates: &[Candidate],
    out: &mut Vec<Scored>,
) {
    out.clear();
    out.extend(candidates.iter().map(|&c| {
        let cost = match kind {
            PickKind::Decode => phased_decode_cost(
                c.load,
                c.prefilling,
                request_tokens,
                settings.weight,
                settings.prefilling_weight,
            ),
            PickKind::Prefill => {
                prefill_cost(c.load, request_tokens, c.cached_tokens, settings.overlap_credit)
            }
        };
        Scored { candidate: c, cost }
    }));
}

/// The decode cost of a candidate.
pub fn decode_cost(load: Load, request_tokens: u64, weight: RequestWeight) -> f64 {
    load.booked_input_tokens as f64 + request_tokens as f64 + weight.get() * load.held_requests as f64
}

/// The decode cost with the held requests still in prefill (and their tokens) weighed by `p`
/// against those past it, each by its age weight as `weighted` sums them (`load.prefilling`
/// itself without the age decay); `p` = 1 without the decay is [`decode_cost`] exactly:
///
/// ```text
/// past_tokens + p × Σw·tokens + request_tokens + W × (past_requests + p × Σw)
/// ```
pub fn phased_decode_cost(
    load: Load,
    weighted: WeightedPrefilling,
    request_tokens: u64,
    weight: RequestWeight,
    p: PrefillingWeight,
) -> f64 {
    let prefilling = load.prefilling;
    let past_tokens = (load.booked_input_tokens - prefilling.tokens) as f64;
    let past_requests = (load.held_requests - prefilling.requests) as f64;
    let p = p.get();
    past_tokens
        + p * weighted.tokens
        + request_tokens as f64
        + weight.get() * (past_requests + p * weighted.requests)
}

/// The prefill cost of a candidate: the prefill tokens in flight there once this one is added,
/// minus `credit` per token of this one the target holds in its KV cache already (load minus
/// overlap credit, `manual/features/kv_aware_routing.md`). With credit 1 that is the tokens the
/// target would compute.
pub fn prefill_cost(load: Load, request_tokens: u64, cached_tokens: u64, credit: OverlapCredit) -> f64 {
    let cached = cached_tokens.min(request_tokens) as f64;
    load.booked_input_tokens as f64 + request_tokens as f64 - credit.get() * cached
}

/// Index (into `costs`) of the lowest cost; ties are broken uniformly at random with one pass
/// (reservoir sampling over the tied minimum). `None` for no candidates.
pub fn lowest(costs: impl IntoIterator<Item = f64>, rng: &mut impl Rng) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    let mut ties = 0u32;
    for (i, c) in costs.into_iter().enumerate() {
        match best {
            Some((_, b)) if c > b => {}
            Some((_, b)) if c == b => {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    best = Some((i, c));
                }
            }
            _ => {
                best = Some((i, c));
                ties = 1;
            }
        }
    }
    best
}

/// The legacy policy's choice, as an index into `candidates` (which must not be empty).
/// `cursor` is the pool's round-robin position; `pool_len` the pool's size including targets
/// that are not eligible now.
pub fn legacy<C: Borrow<Candidate>>(
    policy: DecodePolicy,
    candidates: &[C],
    cursor: &mut usize,
    pool_len: usize,
    rng: &mut impl Rng,
) -> usize {
    debug_assert!(!candidates.is_empty());
    match policy {
        DecodePolicy::RoundRobin => {
            let start = *cursor % pool_len.max(1);
            let i = candidates.iter().position(|c| c.borrow().position >= start).unwrap_or(0);
            *cursor = candidates[i].borrow().position + 1;
            i
        }
        DecodePolicy::Random => rng.random_range(0..candidates.len()),
        DecodePolicy::PowerOfTwo => {
            let n = candidates.len();
            if n == 1 {
                return 0;
            }
            let a = rng.random_range(0..n);
            let mut b = rng.random_range(0..n - 1);
            if b >= a {
                b += 1;
            }
            let key = |c: &C| (c.borrow().load.held_requests, c.borrow().load.booked_input_tokens);
            if key(&candidates[b]) < key(&candidates[a]) { b } else { a }
        }
        // A target without a reading comes last: a router that cannot see an engine's load does
        // not pile onto it.
        DecodePolicy::LeastRunning => {
            let held =
                candidates.iter().map(|c| c.borrow().engine_requests.map_or(f64::INFINITY, |n| n as f64));
            lowest(held, rng).map_or(0, |(i, _)| i)
        }
    }
}

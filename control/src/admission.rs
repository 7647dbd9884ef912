//! Fleet admission (`--admission on`): one decision for every proxy, from the ledger and each
//! decode worker's fitted step model (`manual/features/service_classes.md`).
//!
//! A decode pick of class `c` may book a rank only when the worker's step, predicted with the
//! request added ([`crate::fit::predict`]) and divided by the tokens a request gains per step
//! (speculative decoding's accept length, from the engine's `decode_moments`; 1 without it),
//! stays within the tightest ITL target among `c` and
//! every request the worker already holds: under DP attention every rank steps at the busiest
//! one's pace, so each held request sees the worker's step. Every booked request counts whole,
//! those still prefilling too, however long they have waited: the target is a bound on every
//! step the held requests will share, and a prefill stuck now may still end while the request
//! admitted now decodes (the age decay is the decode picks' estimate, not a bound). A worker
//! whose fit does not track its step
//! ([`crate::fit::predict::predictor`]) is not predicted and admits as before; an idle worker
//! always admits (nothing it could hold
//! steps faster). When no candidate admits, or others already wait, the pick waits in the
//! model's one queue ([`queue`]) held by control, in priority, tenant-share and deadline order,
//! and is shed once its TTFT target can no longer be met.

use std::collections::HashMap;

use infera_proto::types::WorkerId;

use crate::fit::regress::Solution;
use crate::ledger::Ledger;
use crate::scoring::Candidate;
use crate::target::TargetKey;
use crate::view::View;

pub mod prefill_fit;
pub mod queue;

/// What a decode pick under admission must keep: its worker's predicted step within `itl_ms`,
/// and, for a class below the top priority, the first token of the next top-class request
/// within `protect_ttft_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmitLimit {
    /// The ITL target of the request's class, ms.
    pub itl_ms: u32,
    /// The top class's TTFT target, ms, for a request of a lower class: it is held while the
    /// prefill queue it would join (the prefill target where it would find the fewest tokens:
    /// the queue booked there, the prompts of requests admitted before their prefill pick
    /// ([`crate::ledger::AwaitingPrefill`]), and what it would book itself, its prompt less
    /// what that target caches of it) predicts a later first token than that
    /// ([`prefill_fit`]). `None` for the top class, which is never held for its TTFT (waiting
    /// would not make it sooner).
    pub protect_ttft_ms: Option<u32>,
}

/// `--admission-prefill-guard`: whether a lower-class request is held for the top class's first
/// token ([`AdmitLimit::protect_ttft_ms`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PrefillGuard {
    /// While the prefill queue it would join, with what it would book there, predicts the top
    /// class's next first token past its target. The queue is read first come, first served:
    /// everything queued counts as ahead of the next top-class request. On a prefill that runs
    /// shortest-prefill-first, short prompts pass long ones, and below the knee this held batch
    /// work without making a top-class first token any sooner (`manual/features/service_classes.md`).
    Queue,
    /// Never: a lower class is held to its ITL target alone (the default).
    #[default]
    Off,
}

/// The step models admission predicts with, per decode worker ([`crate::fit::predict::predictor`]).
#[derive(Clone, Debug, Default)]
pub struct StepFits(HashMap<WorkerId, Solution>);

impl StepFits {
    /// The models in `workers` (those of every pool that track their worker's step).
    pub fn new(workers: impl IntoIterator<Item = (WorkerId, Solution)>) -> Self {
        Self(workers.into_iter().collect())
    }

    /// A worker's fit.
    pub fn get(&self, worker: &WorkerId) -> Option<&Solution> {
        self.0.get(worker)
    }
}

/// Keeps the candidates whose worker admits one more request of `tokens` within `limit`;
/// `false` when none is left.
pub(crate) fn within_predicted_itl(
    candidates: &mut Vec<Candidate>,
    view: &View,
    ledger: &Ledger,
    fits: &StepFits,
    limit: AdmitLimit,
    tokens: u64,
) -> bool {
    candidates.retain(|c| admits(c.key, view, ledger, fits, limit, tokens));
    !candidates.is_empty()
}

/// Whether a lower-class request may join `model`'s prefill queue now (the prefill guard): the
/// tokens it would find there (`found`: the queue booked and awaited on the prefill target where
/// it finds the fewest, plus what it would book itself, its prompt less what that target caches
/// of it) must predict a phase within `ttft_ms` for whoever comes next. No prefill pool (an
/// aggregated model) or no prediction yet: it may.
pub(crate) fn prefill_admits(
    model: &infera_proto::types::ModelName,
    found: Option<u64>,
    ledger: &Ledger,
    ttft_ms: u32,
) -> bool {
    let Some(found) = found else { return true };
    ledger.prefill_fits().predict_ms(model, found).is_none_or(|p| p <= f64::from(ttft_ms))
}

/// Whether `key`'s worker may take one more request of `tokens` within `limit` and the held
/// requests' ITL targets (`false` when the view no longer holds its worker).
fn admits(
    key: TargetKey,
    view: &View,
    ledger: &Ledger,
    fits: &StepFits,
    limit: AdmitLimit,
    tokens: u64,
) -> bool {
    use crate::fit::predict::RankLoad;
    let worker = &view.slot(key).target.worker;
    let Ok(keys) = view.worker_targets(worker, None) else { return false };
    let Some(fit) = fits.get(worker) else { return true };
    let limit_ms = keys.iter().filter_map(|k| ledger.tightest_itl_ms(*k)).fold(limit.itl_ms, u32::min);
    let held: Vec<_> = keys.iter().map(|k| ledger.load(*k)).collect();
    if held.iter().all(|l| l.held_requests == 0) {
        return true;
    }
    let loads: Vec<RankLoad> = held.iter().map(RankLoad::booked).collect();
    let Some(rank) = keys.iter().position(|k| *k == key) else { return false };
    // The targets are per token: with speculative decoding a step yields several.
    fit.worker_step_ms_with(&loads, rank, tokens).is_some_and(|p| fit.itl_ms(p) <= f64::from(limit_ms))
}

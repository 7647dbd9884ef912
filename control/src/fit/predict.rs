//! The decode step time a worker's load predicts, from its fitted step model
//! ([`super::regress`]: `step_ms = base + per_request · requests + per_mtoken · context`), and
//! what one more request would make it: the prediction fleet-wide admission weighs
//! (`manual/features/decode_weight_fit.md`).
//!
//! Under DP attention the ranks step in lockstep at the busiest one's pace, so a worker's step
//! is the largest of its ranks' predictions. The ledger gives each rank's load phase-aware: a
//! decode reservation whose prefill is still running does not step yet. It books input tokens;
//! the tokens generated since are not in it, so a prediction from the ledger reads less context
//! than the engine holds. Pure.

use crate::target::Load;

use super::estimate::{FitReport, MIN_R_SQUARED, MIN_SAMPLES};
use super::regress::Solution;

/// Context is fitted in millions of tokens.
const TOKENS_PER_UNIT: f64 = 1e6;

/// What one rank steps over.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankLoad {
    /// Requests in its decode batch.
    pub requests: f64,
    /// Their context, tokens.
    pub context_tokens: f64,
}

impl RankLoad {
    /// A decode rank's load as the ledger has it: its held requests past their prefill, and their
    /// input tokens.
    pub fn from_ledger(load: &Load) -> Self {
        let requests = load.held_requests.saturating_sub(load.prefilling.requests);
        let tokens = load.booked_input_tokens.saturating_sub(load.prefilling.tokens);
        Self { requests: requests as f64, context_tokens: tokens as f64 }
    }

    /// A decode rank's load with every request booked on it, those still in prefill too: what
    /// it will step with once their prefills end (what fleet admission bounds).
    pub fn booked(load: &Load) -> Self {
        Self { requests: load.held_requests as f64, context_tokens: load.booked_input_tokens as f64 }
    }

    /// The same with one more request of `tokens`.
    pub fn with_request(self, tokens: u64) -> Self {
        Self { requests: self.requests + 1.0, context_tokens: self.context_tokens + tokens as f64 }
    }
}

impl Solution {
    /// The step time `load` predicts on one rank, ms.
    pub fn step_ms(&self, load: RankLoad) -> f64 {
        self.base_ms
            + self.ms_per_request * load.requests
            + self.ms_per_mtoken * load.context_tokens / TOKENS_PER_UNIT
    }

    /// The worker's step with `ranks` loaded: its busiest rank's (`None` without ranks).
    pub fn worker_step_ms(&self, ranks: &[RankLoad]) -> Option<f64> {
        ranks.iter().map(|r| self.step_ms(*r)).reduce(f64::max)
    }

    /// The worker's step with one more request of `tokens` on rank `rank` (an index of `ranks`).
    pub fn worker_step_ms_with(&self, ranks: &[RankLoad], rank: usize, tokens: u64) -> Option<f64> {
        let added = ranks.get(rank)?.with_request(tokens);
        let others = ranks.iter().enumerate().filter(|(i, _)| *i != rank).map(|(_, r)| self.step_ms(*r));
        Some(others.fold(self.step_ms(added), f64::max))
    }

    /// The inter-token latency a request sees at a step of `step_ms`: the step over the tokens
    /// it gains per step (with speculative decoding, several).
    pub fn itl_ms(&self, step_ms: f64) -> f64 {
        step_ms / self.tokens_per_step.max(1.0)
    }
}

/// The model a worker's latest fit predicts its step with, or `None` when it does not track the
/// step: fewer than [`MIN_SAMPLES`] effective intervals, R² below [`MIN_R_SQUARED`], or no
/// positive cost per request. Moving W asks more of a fit (both slopes positive, W's error
/// small: W is their ratio); a prediction does not. A context slope that is not positive — the
/// context too small against the request count to show in the step, as with short prompts — is
/// taken as zero, never as a discount for context.
pub fn predictor(report: &FitReport) -> Option<Solution> {
    let s = report.solution?;
    let tracks = report.samples >= MIN_SAMPLES && s.r_squared >= MIN_R_SQUARED && s.ms_per_request > 0.0;
    tracks.then(|| Solution { ms_per_mtoken: s.ms_per_mtoken.max(0.0), ..s })
}

/// How far a prediction is from what was measured: `predicted / measured − 1` (0 when exact,
/// −0.1 when it predicted 10 % short).
pub fn relative_error(predicted_ms: f64, measured_ms: f64) -> Option<f64> {
    (measured_ms > 0.0 && predicted_ms.is_finite()).then(|| predicted_ms / measured_ms - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Prefilling;

    fn model() -> Solution {
        Solution {
            base_ms: 30.0,
            ms_per_request: 1.5,
            ms_per_mtoken: 3.0,
            r_squared: 0.99,
            samples: 100.0,
            weight_tokens: 500_000.0,
            weight_rel_se: 0.01,
            mean_requests: 6.0,
            mean_context_tokens: 1e6,
            tokens_per_step: 1.0,
        }
    }

    #[test]
    fn requests_still_in_prefill_do_not_step_yet() {
        let load = Load {
            booked_input_tokens: 900_000,
            held_requests: 5,
            prefilling: Prefilling { requests: 2, tokens: 400_000 },
        };
        let r = RankLoad::from_ledger(&load);
        assert_eq!(r, RankLoad { requests: 3.0, context_tokens: 500_000.0 });
        assert_eq!(model().step_ms(r), 30.0 + 4.5 + 1.5);
    }

    fn report(solution: Solution, samples: f64) -> FitReport {
        FitReport {
            solution: Some(solution),
            verdict: crate::fit::Verdict::NotIdentified,
            samples,
            weight: None,
            moved_at: None,
            interval: None,
        }
    }

    #[test]
    fn a_fit_that_tracks_the_step_predicts_even_when_it_cannot_move_w() {
        // Context too small to show: the token slope came out slightly negative, W is not
        // identified, yet the step follows the request count closely.
        let flat = Solution { ms_per_mtoken: -0.4, weight_tokens: f64::INFINITY, ..model() };
        let p = predictor(&report(flat, 100.0)).expect("it tracks the step");
        assert_eq!(p.ms_per_mtoken, 0.0, "never a discount for context");
        assert_eq!(p.step_ms(RankLoad { requests: 4.0, context_tokens: 5e6 }), 36.0);
        assert_eq!(predictor(&report(model(), 100.0)).unwrap(), model());
        // Too few intervals, a poor fit, or no cost per request: no prediction.
        assert_eq!(predictor(&report(model(), MIN_SAMPLES - 1.0)), None);
        assert_eq!(predictor(&report(Solution { r_squared: 0.3, ..model() }, 100.0)), None);
        assert_eq!(predictor(&report(Solution { ms_per_request: 0.0, ..model() }, 100.0)), None);
        assert_eq!(predictor(&FitReport { solution: None, ..report(model(), 100.0) }), None);
    }

    #[test]
    fn the_busiest_rank_paces_the_worker_and_a_candidate_may_make_another_rank_the_busiest() {
        let ranks = [
            RankLoad { requests: 4.0, context_tokens: 0.0 },
            RankLoad { requests: 2.0, context_tokens: 2e6 },
        ];
        let m = model();
        assert_eq!(m.worker_step_ms(&ranks), Some(36.0 + 3.0), "rank 1: 30 + 3 + 6");
        // One more 1 M-token request on rank 0: 30 + 7.5 + 3 = 40.5 > 39.
        assert_eq!(m.worker_step_ms_with(&ranks, 0, 1_000_000), Some(40.5));
        // On rank 1 instead: 30 + 4.5 + 9 = 43.5.
        assert_eq!(m.worker_step_ms_with(&ranks, 1, 1_000_000), Some(43.5));
        assert_eq!(m.worker_step_ms_with(&ranks, 2, 1), None);
        assert_eq!(m.worker_step_ms(&[]), None);
    }

    #[test]
    fn the_error_is_relative_to_what_was_measured() {
        assert!(relative_error(45.0, 50.0).is_some_and(|e| (e + 0.1).abs() < 1e-12));
        assert_eq!(relative_error(50.0, 50.0), Some(0.0));
        assert_eq!(relative_error(45.0, 0.0), None);
    }
}

//! One decode worker's W: its readings → intervals → the forgetting regression → a verdict on
//! the fit → the W in force, bounded and smoothed. Pure: every reading carries its time.
//!
//! - **Trust.** A fit counts only with at least [`MIN_SAMPLES`] effective intervals, R² of at
//!   least [`MIN_R_SQUARED`], both slopes positive and W's relative standard error at most
//!   [`MAX_REL_SE`]. Context that moves only with the request count (collinear inputs) gives no
//!   fit at all. And it must be settled: a second fit forgetting four times faster must agree
//!   with it within [`SETTLED`]. The step time is not linear everywhere (SGLang's, and the sim's,
//!   bends above some batch size); while the operating point moves across such a bend the
//!   slow fit mixes two regimes and can be precise and wrong at once, and the fast one, which
//!   sees mostly the new regime, disagrees. An untrusted fit never moves W: the last W in force
//!   holds (none: the pool's fallback).
//! - **Bounds.** W in force stays within [[`FLOOR`], [`CEILING`]] tokens per request: below
//!   10 k the held-request term is smaller than one request's own prompt in almost every
//!   workload and the cost is token-only in effect; above 100 M it outweighs any rank's whole KV
//!   (a few M tokens) and the cost counts requests only. Outside the bounds a move changes no
//!   pick, so a fit out there says more about the fit than about the engine.
//! - **Smoothing.** The first trusted fit is taken as it is; after it, W in force moves toward
//!   each trusted fit in log space with the time constant of the forgetting half-life
//!   (`1 − e^(−Δt/τ)` of the way per reading, whatever the poll rate), and not at all while the
//!   fit is within [`DEADBAND`] of it. Picks change the load the fit sees; moving slower than
//!   the fit forgets keeps that loop from chasing itself.

use std::time::{Duration, Instant};

use super::interval::{self, NoInterval, WorkerReading};
use super::regress::{Regression, Sample, Solution};

/// Fewest effective intervals before a fit counts.
pub const MIN_SAMPLES: f64 = 20.0;
/// Lowest R² that counts.
pub const MIN_R_SQUARED: f64 = 0.5;
/// Largest relative standard error of W that counts.
pub const MAX_REL_SE: f64 = 0.2;
/// Lowest W in force, tokens per request.
pub const FLOOR: f64 = 1e4;
/// Highest W in force, tokens per request.
pub const CEILING: f64 = 1e8;
/// Most the fast fit's W may differ from the fit's (as a ratio, widened by twice the fast fit's
/// relative standard error) for the fit to count.
pub const SETTLED: f64 = 1.25;
/// How much faster the second fit forgets.
const FAST: u32 = 4;
/// A trusted fit within this ratio of W in force (±5 %) does not move it.
pub const DEADBAND: f64 = 0.05;
/// The W that tells the busiest rank from the others before any trusted fit (the original study's hand
/// fit, 1.05 M, rounded; the geometric middle of the bounds at 1 M).
pub const PRIOR: f64 = 1e6;

/// What the latest fit is worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It moves W.
    Trusted,
    /// Fewer than [`MIN_SAMPLES`] effective intervals.
    TooFewSamples,
    /// No solution (inputs collinear or constant), or a slope not positive.
    NotIdentified,
    /// R² below [`MIN_R_SQUARED`].
    PoorFit,
    /// W's relative standard error above [`MAX_REL_SE`].
    Uncertain,
    /// The fast fit disagrees by more than [`SETTLED`]: the operating point is moving.
    Unsettled,
}

impl Verdict {
    /// A label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trusted => "trusted",
            Self::TooFewSamples => "too_few_samples",
            Self::NotIdentified => "not_identified",
            Self::PoorFit => "poor_fit",
            Self::Uncertain => "uncertain",
            Self::Unsettled => "unsettled",
        }
    }
}

/// W in force, and the reading it was last checked against.
#[derive(Clone, Copy, Debug, PartialEq)]
struct InForce {
    weight: f64,
    /// The latest reading taken since it was set (trusted or not): smoothing counts only the
    /// time between readings, so a trusted fit after a long untrusted spell moves W one
    /// reading's worth, not the whole spell's.
    at: Instant,
}

/// One worker's estimate.
#[derive(Clone, Debug)]
pub struct WorkerFit {
    half_life: Duration,
    regression: Regression,
    /// The same intervals forgotten [`FAST`] times faster.
    fast: Regression,
    last: Option<WorkerReading>,
    /// The latest interval of the busiest rank: the engine's measured step.
    interval: Option<Sample>,
    solution: Option<Solution>,
    verdict: Verdict,
    in_force: Option<InForce>,
    /// When W in force last moved.
    moved_at: Option<Instant>,
}

/// What a worker's estimate says now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitReport {
    /// The latest fit, trusted or not.
    pub solution: Option<Solution>,
    /// What it is worth.
    pub verdict: Verdict,
    /// Effective (decayed) number of intervals taken, solved or not.
    pub samples: f64,
    /// W in force from this worker's fits (`None` before the first trusted one).
    pub weight: Option<f64>,
    /// When W in force last moved.
    pub moved_at: Option<Instant>,
    /// The latest interval of the busiest rank (its mean step time is what the engine measured).
    pub interval: Option<Sample>,
}

impl WorkerFit {
    /// An estimate forgetting (and smoothing) with `half_life`.
    pub fn new(half_life: Duration) -> Self {
        Self {
            half_life,
            regression: Regression::new(half_life),
            fast: Regression::new(half_life / FAST),
            last: None,
            interval: None,
            solution: None,
            verdict: Verdict::TooFewSamples,
            in_force: None,
            moved_at: None,
        }
    }

    /// Takes one reading of the worker.
    pub fn observe(&mut self, reading: WorkerReading) {
        let Some(before) = self.last.replace(reading) else { return };
        let after = self.last.as_ref().expect("just set");
        let guess = self.in_force.map_or(PRIOR, |f| f.weight);
        match interval::interval(&before, after, guess) {
            Ok(sample) => {
                self.regression.add(&sample);
                self.fast.add(&sample);
                self.interval = Some(sample);
            }
            Err(NoInterval::TooFewSteps) => return,
            Err(NoInterval::Reset) => {
                // A restarted engine: its sums start again from this reading; the fit so far
                // still describes the engine.
                return;
            }
        }
        self.solution = self.regression.solve();
        self.verdict = judge(self.regression.samples(), self.solution.as_ref());
        if self.verdict == Verdict::Trusted && !settled(self.solution.as_ref(), self.fast.solve().as_ref()) {
            self.verdict = Verdict::Unsettled;
        }
        let at = after.at;
        match self.solution {
            Some(s) if self.verdict == Verdict::Trusted => {
                self.follow(s.weight_tokens.clamp(FLOOR, CEILING), at)
            }
            _ => {
                if let Some(f) = &mut self.in_force {
                    f.at = f.at.max(at);
                }
            }
        }
    }

    /// What the estimate says now.
    pub fn report(&self) -> FitReport {
        FitReport {
            solution: self.solution,
            verdict: self.verdict,
            samples: self.regression.samples(),
            weight: self.in_force.map(|f| f.weight),
            moved_at: self.moved_at,
            interval: self.interval,
        }
    }

    fn follow(&mut self, target: f64, at: Instant) {
        let Some(InForce { weight, at: since }) = self.in_force else {
            self.in_force = Some(InForce { weight: target, at });
            self.moved_at = Some(at);
            return;
        };
        let gap = (target / weight).ln();
        let mut next = weight;
        if gap.abs() > (1.0 + DEADBAND).ln() {
            let tau = self.half_life.as_secs_f64().max(1e-9);
            let dt = at.saturating_duration_since(since).as_secs_f64();
            next = (weight.ln() + (1.0 - (-dt / tau).exp()) * gap).exp().clamp(FLOOR, CEILING);
            self.moved_at = Some(at);
        }
        self.in_force = Some(InForce { weight: next, at });
    }
}

/// Whether the fast fit agrees with the fit within [`SETTLED`].
fn settled(slow: Option<&Solution>, fast: Option<&Solution>) -> bool {
    let (Some(slow), Some(fast)) = (slow, fast) else { return false };
    let gap = (fast.weight_tokens / slow.weight_tokens).ln().abs();
    // The fast fit is noisier: its own standard error widens the band.
    fast.ms_per_mtoken > 0.0 && gap.is_finite() && gap <= SETTLED.ln() + 2.0 * fast.weight_rel_se
}

/// The verdict on a fit of `samples` effective intervals.
fn judge(samples: f64, solution: Option<&Solution>) -> Verdict {
    if samples < MIN_SAMPLES {
        return Verdict::TooFewSamples;
    }
    let Some(s) = solution else { return Verdict::NotIdentified };
    if !(s.ms_per_request > 0.0 && s.ms_per_mtoken > 0.0) {
        Verdict::NotIdentified
    } else if s.r_squared < MIN_R_SQUARED {
        Verdict::PoorFit
    } else if s.weight_rel_se > MAX_REL_SE {
        Verdict::Uncertain
    } else {
        Verdict::Trusted
    }
}

#[cfg(test)]
#[path = "estimate_tests.rs"]
mod tests;

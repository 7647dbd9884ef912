//! Two successive `/v1/loads` readings of one worker → one interval of its busiest rank.
//!
//! Under DP attention every rank steps in lockstep, paced by the busiest one, so each rank's
//! `decode_moments` carry the same step times and only the busiest rank's load explains them.
//! Per rank, the difference of the running sums over the interval gives its decode steps, its
//! mean batch (Δ Σ batch / Δ steps) and its mean step time (Δ Σ step_us / Δ steps). Its context
//! is read at the two ends only (`num_used_tokens`); context moves mostly in steps, as requests
//! join and leave, and so does the batch, so the context between the ends is weighed like the
//! batch is: where the mean batch sits between the two readings' `num_running_reqs` says how
//! much of the interval the later context held (half when the count did not change). The busiest rank is the one with the
//! most load in requests, `batch + context / W`, under the W in force (a guess is enough: it
//! only has to tell the busiest rank from the others).

use std::time::Instant;

use super::regress::Sample;

/// Fewest decode steps an interval must average on the busiest rank to count.
pub const MIN_STEPS: f64 = 2.0;

/// SGLang's `decode_moments`: `[steps, Σ batch, Σ step_us, Σ batch², Σ batch·step_us, Σ generated]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments(pub [f64; 6]);

/// What one rank reported.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankReading {
    /// The rank.
    pub rank: u32,
    /// Its moment sums (`None` before its first counted decode step).
    pub moments: Option<Moments>,
    /// KV tokens in use.
    pub used_tokens: u64,
    /// Requests in the running batch.
    pub running: u64,
}

/// One answer of a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerReading {
    /// When it arrived.
    pub at: Instant,
    /// Its ranks.
    pub ranks: Vec<RankReading>,
}

/// Why a pair of readings gave no interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoInterval {
    /// No rank decoded enough steps back to back in between.
    TooFewSteps,
    /// A rank's sums went down: the engine restarted. The later reading starts afresh.
    Reset,
}

/// The interval from `before` to `after` (the busiest rank under `weight_guess`, tokens per
/// request, > 0).
pub fn interval(
    before: &WorkerReading,
    after: &WorkerReading,
    weight_guess: f64,
) -> Result<Sample, NoInterval> {
    let mut best: Option<(f64, Sample)> = None;
    for a in &after.ranks {
        let Some(b) = before.ranks.iter().find(|b| b.rank == a.rank) else { continue };
        let (m0, m1) = (b.moments.unwrap_or_default().0, a.moments.unwrap_or_default().0);
        if m1.iter().zip(&m0).any(|(x1, x0)| x1 < x0) {
            return Err(NoInterval::Reset);
        }
        let steps = m1[0] - m0[0];
        if steps < MIN_STEPS {
            continue;
        }
        let request_steps = m1[1] - m0[1];
        let requests = request_steps / steps;
        let step_ms = (m1[2] - m0[2]) / steps / 1000.0;
        let generated = m1[5] - m0[5];
        let tokens_per_step =
            if request_steps > 0.0 && generated > 0.0 { generated / request_steps } else { 1.0 };
        let context_tokens = context(b, a, requests);
        let load = requests + context_tokens / weight_guess;
        let sample = Sample { at: after.at, requests, context_tokens, step_ms, steps, tokens_per_step };
        if best.as_ref().is_none_or(|(l, _)| load > *l) {
            best = Some((load, sample));
        }
    }
    best.map(|(_, s)| s).ok_or(NoInterval::TooFewSteps)
}

/// The context over the interval from `b` to `a` with a mean batch of `requests`.
fn context(b: &RankReading, a: &RankReading, requests: f64) -> f64 {
    let (n0, n1) = (b.running as f64, a.running as f64);
    let later = if (n1 - n0).abs() >= 1.0 { ((requests - n0) / (n1 - n0)).clamp(0.0, 1.0) } else { 0.5 };
    let (k0, k1) = (b.used_tokens as f64, a.used_tokens as f64);
    k0 + (k1 - k0) * later
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn rank(rank: u32, m: [f64; 6], used: u64) -> RankReading {
        RankReading { rank, moments: Some(Moments(m)), used_tokens: used, running: 6 }
    }

    #[test]
    fn the_busiest_ranks_deltas_make_the_interval() {
        let t0 = Instant::now();
        let before = WorkerReading {
            at: t0,
            ranks: vec![
                rank(0, [10.0, 60.0, 400_000.0, 0.0, 0.0, 0.0], 500_000),
                rank(1, [10.0, 20.0, 400_000.0, 0.0, 0.0, 0.0], 100_000),
            ],
        };
        let after = WorkerReading {
            at: t0 + Duration::from_millis(100),
            ranks: vec![
                // 4 steps of 6.5 requests on average, 41 ms each, 3.5 tokens a request a step
                // (speculative decoding: 91 tokens over 26 request-steps).
                rank(0, [14.0, 86.0, 564_000.0, 0.0, 0.0, 91.0], 700_000),
                rank(1, [14.0, 28.0, 564_000.0, 0.0, 0.0, 0.0], 100_000),
            ],
        };
        let s = interval(&before, &after, 1e6).unwrap();
        assert_eq!(
            (s.requests, s.context_tokens, s.step_ms, s.steps, s.at),
            (6.5, 600_000.0, 41.0, 4.0, after.at)
        );
        assert_eq!(s.tokens_per_step, 3.5);
        let plain = WorkerReading {
            at: after.at,
            ranks: vec![rank(0, [14.0, 86.0, 564_000.0, 0.0, 0.0, 0.0], 700_000)],
        };
        assert_eq!(
            interval(&before, &plain, 1e6).unwrap().tokens_per_step,
            1.0,
            "no generated count: one a step"
        );
    }

    #[test]
    fn context_is_weighed_like_the_batch() {
        let t0 = Instant::now();
        let at = |steps: f64, batch: f64, used: u64, running: u64| WorkerReading {
            at: t0,
            ranks: vec![RankReading {
                rank: 0,
                moments: Some(Moments([steps, batch, steps * 40_000.0, 0.0, 0.0, 0.0])),
                used_tokens: used,
                running,
            }],
        };
        // 6 → 7 requests a quarter of the way in: 1 step of 6, then 3 of 7.
        let s = interval(&at(0.0, 0.0, 600_000, 6), &at(4.0, 27.0, 700_000, 7), 1e6).unwrap();
        assert_eq!((s.requests, s.context_tokens), (6.75, 675_000.0));
        // A swap (one left, one joined): the count says nothing, the middle is taken.
        let s = interval(&at(0.0, 0.0, 600_000, 6), &at(4.0, 24.0, 700_000, 6), 1e6).unwrap();
        assert_eq!(s.context_tokens, 650_000.0);
    }

    #[test]
    fn idle_ranks_and_restarts_give_no_interval() {
        let t0 = Instant::now();
        let r = |steps: f64| WorkerReading {
            at: t0,
            ranks: vec![rank(0, [steps, steps, steps * 40_000.0, 0.0, 0.0, 0.0], 0)],
        };
        assert_eq!(interval(&r(10.0), &r(11.0), 1e6), Err(NoInterval::TooFewSteps));
        assert_eq!(interval(&r(10.0), &r(3.0), 1e6), Err(NoInterval::Reset));
        let none = WorkerReading {
            at: t0,
            ranks: vec![RankReading { rank: 0, moments: None, used_tokens: 0, running: 0 }],
        };
        assert_eq!(interval(&none, &r(5.0), 1e6).unwrap().steps, 5.0, "no moments yet reads as zeros");
    }
}

//! Paired statistics over runs: run *r* of every arm replays the same trace window with the same
//! seed, so an arm is compared with another run by run. The ratio of two arms is the ratio of
//! their means, and its 95 % interval comes from a paired bootstrap: resample the runs (the same
//! indices for both arms) with replacement, take the ratio of the resampled means, and read the
//! 2.5th and 97.5th percentiles. Pure; the randomness is passed in.

use rand::Rng;

/// Resamples of the bootstrap.
pub(crate) const RESAMPLES: usize = 10_000;

/// A ratio of means with its paired-bootstrap 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RatioInterval {
    /// mean(ours) / mean(theirs) over every run.
    pub(crate) ratio: f64,
    /// The interval's ends (equal to `ratio` with one run).
    pub(crate) low: f64,
    pub(crate) high: f64,
    /// Paired runs it rests on.
    pub(crate) runs: usize,
}

impl RatioInterval {
    /// `1.064× [1.021, 1.102] (5 runs)`.
    pub(crate) fn describe(&self) -> String {
        format!("{:.3}× [{:.3}, {:.3}] ({} runs)", self.ratio, self.low, self.high, self.runs)
    }
}

/// The ratio of `ours` to `theirs` (paired: index *r* is run *r* of both), with its interval
/// from `resamples` bootstrap resamples; `None` without a pair or with a mean of 0.
pub(crate) fn paired_ratio(
    ours: &[f64],
    theirs: &[f64],
    resamples: usize,
    rng: &mut impl Rng,
) -> Option<RatioInterval> {
    let n = ours.len().min(theirs.len());
    let ratio_of = |idx: &mut dyn Iterator<Item = usize>| {
        let (a, b) = idx.fold((0.0, 0.0), |(a, b), i| (a + ours[i], b + theirs[i]));
        (b > 0.0).then(|| a / b)
    };
    let ratio = ratio_of(&mut (0..n))?;
    if n < 2 {
        return Some(RatioInterval { ratio, low: ratio, high: ratio, runs: n });
    }
    let mut samples: Vec<f64> =
        (0..resamples).filter_map(|_| ratio_of(&mut (0..n).map(|_| rng.random_range(0..n)))).collect();
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Some(RatioInterval { ratio, low: at(0.025), high: at(0.975), runs: n })
}

/// [`paired_ratio`] of two series of `(run, value)`, paired by run number (a run only `ours`
/// has is left out).
pub(crate) fn paired_by_run(
    ours: &[(usize, f64)],
    theirs: &[(usize, f64)],
    rng: &mut impl Rng,
) -> Option<RatioInterval> {
    let (ours, theirs): (Vec<f64>, Vec<f64>) =
        ours.iter().filter_map(|(run, v)| Some((*v, theirs.iter().find(|(r, _)| r == run)?.1))).unzip();
    paired_ratio(&ours, &theirs, RESAMPLES, rng)
}

/// How much less than the best-serving arm an arm may serve (tok/s) and still be a reference:
/// an arm that serves far less runs fewer requests at once on the decode, so its interactivity
/// is not measured at the same operating point (a router that starves its decode of work
/// decodes the little it lets through fast).
pub(crate) const THROTTLED_SHARE: f64 = 0.10;

/// For each throughput, whether it is within [`THROTTLED_SHARE`] of the highest.
pub(crate) fn serves_the_load(throughputs: &[f64]) -> Vec<bool> {
    let best = throughputs.iter().copied().fold(0.0, f64::max);
    throughputs.iter().map(|&t| t >= (1.0 - THROTTLED_SHARE) * best).collect()
}

/// The mean of `xs` (0 when empty).
pub(crate) fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    #[test]
    fn a_steady_lead_has_an_interval_above_one_and_noise_straddles_it() {
        let mut rng = SmallRng::seed_from_u64(1);
        // Run by run 4–6 % ahead, though the runs themselves spread by 10 points: pairing sees it.
        let theirs = [70.0, 80.0, 75.0, 78.0, 72.0];
        let ours: Vec<f64> = theirs.iter().zip([1.04, 1.06, 1.05, 1.04, 1.06]).map(|(t, r)| t * r).collect();
        let lead = paired_ratio(&ours, &theirs, RESAMPLES, &mut rng).unwrap();
        assert!((lead.ratio - 1.05).abs() < 0.005, "{lead:?}");
        assert!(lead.low > 1.03 && lead.high < 1.07, "{lead:?}");
        assert_eq!(lead.runs, 5);
        // Ahead in some runs, behind in others: the interval holds 1.
        let mixed = [73.0, 76.0, 79.0, 74.0, 75.0];
        let tie = paired_ratio(&mixed, &theirs, RESAMPLES, &mut rng).unwrap();
        assert!(tie.low < 1.0 && tie.high > 1.0, "{tie:?}");
        assert!(tie.describe().ends_with("(5 runs)"));
    }

    #[test]
    fn one_run_is_a_point_and_nothing_or_zero_is_no_ratio() {
        let mut rng = SmallRng::seed_from_u64(2);
        let one = paired_ratio(&[84.0], &[80.0], RESAMPLES, &mut rng).unwrap();
        assert_eq!((one.low, one.high, one.runs), (one.ratio, one.ratio, 1));
        assert!(paired_ratio(&[], &[], RESAMPLES, &mut rng).is_none());
        assert!(paired_ratio(&[1.0, 2.0], &[0.0, 0.0], RESAMPLES, &mut rng).is_none());
        assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
        assert_eq!(serves_the_load(&[100.0, 91.0, 89.0]), [true, true, false]);
    }
}

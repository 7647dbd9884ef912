//! Interactivity at equal throughput, from a load sweep (`--concurrency A,B,…`).
//!
//! At one offered load, the arm that serves more decodes larger batches, so its requests stream
//! slower: a closed-loop session whose first token comes sooner sends its next turn sooner.
//! Comparing p90 interactivity at the same sessions charges that arm for serving more. The
//! original study's claim is made "at the same throughput", so this reads it that way:
//!
//! - each arm's sweep is a curve of (tok/s/GPU, p90 interactivity) points, the means over its
//!   runs at each offered load;
//! - the recommended arm's curve is read at each peer point's throughput, on its efficient
//!   points only: a load that another load beats on both throughput and p90 is not an
//!   operating point anyone would choose (past saturation, more sessions can serve less, and
//!   slower). Between two efficient points the reading is linear. Where the peer serves less
//!   than the lowest of them, that point's p90 is a floor ("at least"): the recommended arm
//!   serves more than the peer there, at that p90. Where the peer serves more than every load
//!   of the recommended arm, there is no reading;
//! - the ratio is that reading over the peer's p90. Its 95 % interval comes from a paired
//!   bootstrap over runs: run r of every arm and load shares a seed and a trace window, so one
//!   resample of run indices recomputes every mean on both sides.
//!
//! Pure; the randomness is passed in.

use rand::Rng;

use super::stats;

/// One run of one arm at one offered load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sample {
    /// Concurrent sessions offered.
    pub(crate) sessions: usize,
    /// 1-based; run r of every arm and load shares its seed and trace window.
    pub(crate) run: usize,
    pub(crate) tokens_per_gpu: f64,
    /// p90 interactivity (tokens/s a request streams at, its slow side).
    pub(crate) p90: f64,
}

/// A point of an arm's curve: the means over the runs taken at one offered load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CurvePoint {
    pub(crate) sessions: usize,
    pub(crate) tokens_per_gpu: f64,
    pub(crate) p90: f64,
}

/// The recommended arm against one peer point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AtPeerPoint {
    /// The peer's point (the means over every run).
    pub(crate) peer: CurvePoint,
    /// The recommended arm's p90 at the peer's throughput (`None`: it has no curve).
    pub(crate) ours: Option<Reading>,
    /// `ours / peer.p90`.
    pub(crate) ratio: Option<f64>,
    /// The ratio's 95 % interval (`None` with one run, or when fewer than nine in ten
    /// resamples reach the peer's throughput).
    pub(crate) interval: Option<Interval>,
    /// Paired runs it rests on.
    pub(crate) runs: usize,
}

/// A curve read at a throughput.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Reading {
    pub(crate) p90: f64,
    pub(crate) bound: Bound,
}

/// What a [`Reading`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Between two of the curve's efficient points (or on one).
    Between,
    /// Below the lowest efficient point's throughput: that point's p90, a floor.
    AtLeast,
}

impl Bound {
    /// How a ratio read this way is written: `≥` for a floor.
    pub(crate) fn sign(self) -> &'static str {
        match self {
            Bound::Between => "",
            Bound::AtLeast => "≥ ",
        }
    }
}

/// A 95 % interval's ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Interval {
    pub(crate) low: f64,
    pub(crate) high: f64,
}

/// An arm's curve over the runs `runs` (repeats count again): one point per offered load
/// that has a sample of every run in `runs`, in the order of the loads.
pub(crate) fn curve(samples: &[Sample], runs: &[usize]) -> Vec<CurvePoint> {
    let mut loads: Vec<usize> = samples.iter().map(|s| s.sessions).collect();
    loads.sort_unstable();
    loads.dedup();
    loads
        .into_iter()
        .filter_map(|sessions| {
            let taken: Option<Vec<&Sample>> =
                runs.iter().map(|r| samples.iter().find(|s| s.sessions == sessions && s.run == *r)).collect();
            let taken = taken.filter(|t| !t.is_empty())?;
            let tokens: Vec<f64> = taken.iter().map(|s| s.tokens_per_gpu).collect();
            let p90: Vec<f64> = taken.iter().map(|s| s.p90).collect();
            Some(CurvePoint { sessions, tokens_per_gpu: stats::mean(&tokens), p90: stats::mean(&p90) })
        })
        .collect()
}

/// The curve's p90 at throughput `x`, read on its efficient points (none other serves at
/// least as much at a p90 at least as high, and beats it on one): linear between the two around
/// `x`, below the lowest a floor at its p90; `None` above the highest, or without points.
pub(crate) fn at_throughput(curve: &[CurvePoint], x: f64) -> Option<Reading> {
    let beats = |q: &CurvePoint, p: &CurvePoint| {
        q.tokens_per_gpu >= p.tokens_per_gpu
            && q.p90 >= p.p90
            && (q.tokens_per_gpu > p.tokens_per_gpu || q.p90 > p.p90)
    };
    let mut points: Vec<(f64, f64)> = curve
        .iter()
        .filter(|p| !curve.iter().any(|q| beats(q, p)))
        .map(|p| (p.tokens_per_gpu, p.p90))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (&(lo_x, lo_y), &(hi_x, _)) = (points.first()?, points.last()?);
    if x > hi_x {
        return None;
    }
    if x < lo_x {
        return Some(Reading { p90: lo_y, bound: Bound::AtLeast });
    }
    let p90 = points.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        (x0 <= x && x <= x1).then(|| if x1 > x0 { y0 + (x - x0) / (x1 - x0) * (y1 - y0) } else { y0 })
    });
    Some(Reading { p90: p90.unwrap_or(lo_y), bound: Bound::Between })
}

/// The recommended arm (`ours`) read at each of the peer's points, with paired-bootstrap
/// intervals from `resamples` resamples of the runs both arms have at every load (a resample
/// reads its own curve the same way, a bound where it falls outside).
pub(crate) fn versus(
    ours: &[Sample],
    peer: &[Sample],
    resamples: usize,
    rng: &mut impl Rng,
) -> Vec<AtPeerPoint> {
    let mut runs: Vec<usize> =
        ours.iter().map(|s| s.run).filter(|r| peer.iter().any(|p| p.run == *r)).collect();
    runs.sort_unstable();
    runs.dedup();
    let (our_curve, peer_curve) = (curve(ours, &runs), curve(peer, &runs));
    let mut boot: Vec<Vec<f64>> = vec![Vec::new(); peer_curve.len()];
    if runs.len() > 1 {
        for _ in 0..resamples {
            let drawn: Vec<usize> = (0..runs.len()).map(|_| runs[rng.random_range(0..runs.len())]).collect();
            let (mine, theirs) = (curve(ours, &drawn), curve(peer, &drawn));
            for (i, p) in theirs.iter().enumerate() {
                if let Some(y) = at_throughput(&mine, p.tokens_per_gpu)
                    && p.p90 > 0.0
                {
                    boot[i].push(y.p90 / p.p90);
                }
            }
        }
    }
    peer_curve
        .iter()
        .zip(boot)
        .map(|(p, mut samples)| {
            let ours = at_throughput(&our_curve, p.tokens_per_gpu);
            let ratio = ours.filter(|_| p.p90 > 0.0).map(|y| y.p90 / p.p90);
            samples.sort_by(f64::total_cmp);
            let interval = (ratio.is_some() && !samples.is_empty() && samples.len() * 10 >= resamples * 9)
                .then(|| {
                    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
                    Interval { low: at(0.025), high: at(0.975) }
                });
            AtPeerPoint { peer: *p, ours, ratio, interval, runs: runs.len() }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    fn s(sessions: usize, run: usize, tokens_per_gpu: f64, p90: f64) -> Sample {
        Sample { sessions, run, tokens_per_gpu, p90 }
    }

    #[test]
    fn the_curve_is_read_between_its_efficient_points_and_as_a_floor_below_them() {
        let samples = [s(66, 1, 10_000.0, 90.0), s(88, 1, 12_000.0, 80.0), s(110, 1, 14_000.0, 70.0)];
        let c = curve(&samples, &[1]);
        assert_eq!(c.len(), 3);
        let between = |p90| Some(Reading { p90, bound: Bound::Between });
        assert_eq!(at_throughput(&c, 13_000.0), between(75.0));
        assert_eq!(at_throughput(&c, 10_000.0), between(90.0));
        assert_eq!(at_throughput(&c, 9_999.0), Some(Reading { p90: 90.0, bound: Bound::AtLeast }));
        assert_eq!(at_throughput(&c, 14_001.0), None, "no load of it serves that much");
        assert_eq!(at_throughput(&[], 1.0), None);
        assert_eq!((Bound::AtLeast.sign(), Bound::Between.sign()), ("≥ ", ""));
        // A load another one beats on both (more sessions past saturation: less served, and
        // slower) is no operating point: the reading skips it.
        let past = [s(66, 1, 20_036.0, 80.7), s(88, 1, 19_612.0, 66.7), s(110, 1, 16_865.0, 59.6)];
        let c = curve(&past, &[1]);
        assert_eq!(at_throughput(&c, 16_483.0), Some(Reading { p90: 80.7, bound: Bound::AtLeast }));
        assert_eq!(at_throughput(&c, 19_800.0), Some(Reading { p90: 80.7, bound: Bound::AtLeast }));
        // A load without every run drawn is left out; a repeated run counts twice.
        let two = [s(88, 1, 10.0, 80.0), s(88, 2, 20.0, 60.0), s(110, 1, 30.0, 50.0)];
        assert_eq!(curve(&two, &[1, 2]).len(), 1);
        assert_eq!(curve(&two, &[2, 2, 1])[0].p90, (60.0 + 60.0 + 80.0) / 3.0);
    }

    /// The case the module is for: at the same sessions the recommended arm serves 12 % more and
    /// streams 8 % slower; at the peer's throughput its own curve is ahead.
    #[test]
    fn serving_more_at_the_same_sessions_is_not_counted_as_streaming_slower() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut ours = Vec::new();
        let mut peer = Vec::new();
        for run in 1..=4 {
            let noise = 1.0 + 0.01 * run as f64;
            for (sessions, tokens, p90) in [(66, 14_000.0, 84.0), (88, 18_000.0, 70.0), (110, 20_000.0, 62.0)]
            {
                ours.push(s(sessions, run, tokens * noise, p90 * noise));
                peer.push(s(sessions, run, tokens * 0.89 * noise, p90 * 1.08 * noise));
            }
        }
        let rows = versus(&ours, &peer, 2_000, &mut rng);
        assert_eq!(rows.len(), 3);
        let at88 = rows.iter().find(|r| r.peer.sessions == 88).unwrap();
        // The peer's 88-session point (≈ 16,000 tok/s/GPU, p90 ≈ 75.6) meets our curve between
        // our 66 and 88 (≈ 77 there).
        let (ratio, interval) = (at88.ratio.unwrap(), at88.interval.unwrap());
        assert!(ratio > 1.0 && interval.low > 1.0 && interval.high >= ratio, "{at88:?}");
        assert_eq!(at88.runs, 4);
        assert_eq!(at88.ours.unwrap().bound, Bound::Between);
        // The peer's lowest point serves less than our lowest: our lowest point's p90 is a
        // floor, and the ratio "at least" 84 / 90.72.
        let at66 = rows.iter().find(|r| r.peer.sessions == 66).unwrap();
        let floor = at66.ours.unwrap();
        assert_eq!(floor.bound, Bound::AtLeast);
        assert!((at66.ratio.unwrap() - 84.0 / 90.72).abs() < 1e-9, "{at66:?}");
    }

    #[test]
    fn one_run_is_a_point() {
        let mut rng = SmallRng::seed_from_u64(4);
        let ours = [s(88, 1, 100.0, 80.0), s(110, 1, 200.0, 60.0)];
        let peer = [s(88, 1, 150.0, 68.0)];
        let rows = versus(&ours, &peer, 100, &mut rng);
        assert_eq!(rows[0].ours, Some(Reading { p90: 70.0, bound: Bound::Between }));
        assert_eq!(rows[0].ratio, Some(70.0 / 68.0));
        assert_eq!((rows[0].interval, rows[0].runs), (None, 1));
    }
}

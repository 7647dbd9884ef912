use super::*;
use crate::fit::interval::{Moments, RankReading};

/// A decode worker of 8 lockstep ranks whose step time is `31.2 + 1.55 · (n + k / w)` ms on the
/// busiest rank (the sim's model below its knee), read every 100 ms after 3 steps.
struct Engine {
    t0: Instant,
    at: u64,
    sums: [[f64; 6]; 8],
    context: [u64; 8],
    /// Deterministic noise source (an LCG).
    seed: u64,
}

impl Engine {
    fn new() -> Self {
        Self { t0: Instant::now(), at: 0, sums: [[0.0; 6]; 8], context: [0; 8], seed: 1 }
    }

    fn uniform(&mut self) -> f64 {
        self.seed = self.seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.seed >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One interval: the busiest rank (0) decodes `n` requests while its context moves to
    /// `k_end` (linearly); the step time is the model plus `noise_ms` of uniform noise.
    fn interval(&mut self, n: f64, k_end: u64, w: f64, noise_ms: f64) -> WorkerReading {
        let k_mean = (self.context[0] + k_end) as f64 / 2.0;
        let step = 31.2 + 1.55 * (n + k_mean / w) + noise_ms * (2.0 * self.uniform() - 1.0);
        let steps = 3.0;
        for (r, sums) in self.sums.iter_mut().enumerate() {
            let batch = if r == 0 { n } else { (n - 3.0).max(1.0) };
            sums[0] += steps;
            sums[1] += steps * batch;
            sums[2] += steps * (step * 1000.0).floor();
        }
        self.context = [k_end, 50_000, 50_000, 50_000, 50_000, 50_000, 50_000, 50_000];
        self.at += 100;
        self.reading()
    }

    fn reading(&self) -> WorkerReading {
        WorkerReading {
            at: self.t0 + Duration::from_millis(self.at),
            ranks: (0..8)
                .map(|r| RankReading {
                    rank: r as u32,
                    moments: Some(Moments(self.sums[r])),
                    used_tokens: self.context[r],
                    running: 0,
                })
                .collect(),
        }
    }

    /// `count` intervals with the busiest rank's requests cycling 5..=8 and its context
    /// independently over 100 k – 600 k tokens.
    fn run(&mut self, fit: &mut WorkerFit, count: u64, w: f64, noise_ms: f64) {
        for i in 0..count {
            let n = 5.0 + (i % 4) as f64;
            let k = 100_000 + 50_000 * ((i * 7 + self.at / 100) % 11);
            fit.observe(self.interval(n, k, w, noise_ms));
        }
    }
}

/// An engine read once, then for `count` intervals at `w` with `noise_ms`, by a fit with
/// `half_life`.
fn started(half_life: Duration, count: u64, w: f64, noise_ms: f64) -> (Engine, WorkerFit) {
    let (mut e, mut fit) = (Engine::new(), WorkerFit::new(half_life));
    fit.observe(e.reading());
    e.run(&mut fit, count, w, noise_ms);
    (e, fit)
}

const HALF_LIFE: Duration = Duration::from_secs(30);

#[test]
fn exact_readings_recover_w_and_put_it_in_force() {
    let (_, fit) = started(HALF_LIFE, 60, 1.05e6, 0.0);
    let r = fit.report();
    let s = r.solution.unwrap();
    // Step times are whole microseconds, as SGLang reports them: that is the only error.
    assert!((s.weight_tokens / 1.05e6 - 1.0).abs() < 0.01, "{s:?}");
    assert!(s.r_squared > 0.999, "{s:?}");
    assert_eq!(r.verdict, Verdict::Trusted);
    assert!((r.weight.unwrap() / 1.05e6 - 1.0).abs() < 0.01, "the first trusted fit is taken as it is");
}

#[test]
fn noisy_step_times_still_recover_w() {
    // ±0.3 ms uniform noise (σ ≈ 0.17 ms) on a context term spanning 0.7 ms.
    let (_, fit) = started(HALF_LIFE, 600, 1.05e6, 0.3);
    let r = fit.report();
    let s = r.solution.unwrap();
    assert_eq!(r.verdict, Verdict::Trusted, "{s:?}");
    assert!((s.weight_tokens / 1.05e6 - 1.0).abs() < 3.0 * s.weight_rel_se.max(0.02), "{s:?}");
    assert!(s.weight_rel_se < MAX_REL_SE, "{s:?}");
}

#[test]
fn too_few_samples_move_nothing() {
    let (_, fit) = started(HALF_LIFE, 15, 1.05e6, 0.0);
    let r = fit.report();
    assert_eq!((r.verdict, r.weight), (Verdict::TooFewSamples, None));
    assert!(r.solution.is_some(), "the fit is shown before it counts");
}

#[test]
fn collinear_inputs_hold_the_last_good_w() {
    let (mut e, mut fit) = started(Duration::from_secs(3), 200, 1.05e6, 0.3);
    let good = fit.report().weight.unwrap();
    // Then every request holds 100 k tokens for 50 half-lives: context only echoes the count,
    // and what the earlier intervals said has faded to nothing.
    for i in 0..1_500u64 {
        let n = 5.0 + (i % 4) as f64;
        let k = 100_000 * n as u64;
        e.context[0] = k; // the context is k throughout the interval
        fit.observe(e.interval(n, k, 1.05e6, 0.3));
    }
    let r = fit.report();
    // With the noise of real step times the slopes cannot be told apart: no solution, or one far
    // too uncertain to count. While the earlier intervals still said enough, W could move a
    // little (within the smoothing); after that it holds.
    assert!(matches!(r.verdict, Verdict::NotIdentified | Verdict::Uncertain), "{r:?}");
    let held = r.weight.unwrap();
    assert!((held / good - 1.0).abs() < 0.1, "{good} → {held}");
    e.context[0] = 100_000 * 5;
    for _ in 0..300 {
        fit.observe(e.interval(5.0, 500_000, 1.05e6, 0.3));
    }
    assert_eq!(fit.report().weight, Some(held), "constant inputs move nothing");
}

#[test]
fn noise_alone_moves_nothing() {
    // 20 ms of noise against 6 ms of signal.
    let (_, fit) = started(HALF_LIFE, 200, 1.05e6, 20.0);
    let r = fit.report();
    assert!(matches!(r.verdict, Verdict::PoorFit | Verdict::Uncertain | Verdict::NotIdentified), "{r:?}");
    assert_eq!(r.weight, None);
}

#[test]
fn w_in_force_follows_a_new_regime_smoothly_and_within_bounds() {
    let (mut e, mut fit) = started(Duration::from_secs(2), 60, 1.05e6, 0.0);
    // The engine changes: one request now costs 180 k tokens. Readings are 100 ms apart, so
    // W in force can move by at most 1 − e^(−0.1 / 2) ≈ 4.9 % of the log gap per reading.
    let mut last = fit.report().weight.unwrap();
    for _ in 0..30 {
        e.run(&mut fit, 1, 1.8e5, 0.0);
        let w = fit.report().weight.unwrap();
        assert!(w <= last && w >= last * 0.9, "{last} → {w}: no jump");
        last = w;
    }
    e.run(&mut fit, 600, 1.8e5, 0.0);
    let w = fit.report().weight.unwrap();
    assert!((w / 1.8e5 - 1.0).abs() <= DEADBAND + 0.01, "settled at {w}");
    // A fit of 2,000 tokens per request is held at the floor.
    e.run(&mut fit, 600, 2e3, 0.0);
    let w = fit.report().weight.unwrap();
    assert!((FLOOR..=FLOOR * (1.0 + DEADBAND)).contains(&w), "{w}");
}

#[test]
fn a_restarted_engine_starts_its_sums_again() {
    let (mut e, mut fit) = started(HALF_LIFE, 60, 1.05e6, 0.0);
    let before = fit.report();
    e.sums = [[0.0; 6]; 8];
    fit.observe(e.reading());
    assert_eq!(fit.report(), before, "the reset interval is not a sample");
    e.run(&mut fit, 10, 1.05e6, 0.0);
    assert!((fit.report().solution.unwrap().weight_tokens / 1.05e6 - 1.0).abs() < 0.01);
}

//! Weighted least squares with exponential forgetting, for one worker's decode step time:
//!
//! ```text
//! step_ms = base + per_request · requests + per_mtoken · context_mtokens
//! ```
//!
//! over intervals of the busiest rank ([`super::interval`]). Each interval weighs as many steps
//! as it averages (its mean step time is that much less noisy) times `0.5^(age / half_life)`:
//! the sums decay as time passes, so the fit follows the operating point. Pure: time comes in
//! with each sample.
//!
//! The solution carries what says whether to believe it: R², the effective number of
//! intervals, and the standard errors of both slopes, from which the relative standard error
//! of W = per_request / per_token follows (first-order, with their covariance). Collinear
//! inputs — context that moves only with the request count — give no solution at all.

use std::time::{Duration, Instant};

/// Context is regressed in millions of tokens, so every sum stays well inside f64 precision.
const TOKENS_PER_UNIT: f64 = 1e6;

/// One interval of the busiest rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// When the interval ended.
    pub at: Instant,
    /// The busiest rank's mean decode batch over the interval (requests).
    pub requests: f64,
    /// Its context (KV tokens in use) over the interval.
    pub context_tokens: f64,
    /// Its mean decode step time, ms.
    pub step_ms: f64,
    /// Decode steps the interval averages.
    pub steps: f64,
    /// Tokens each request gained per decode step (Δ Σ generated / Δ Σ batch): 1 without
    /// speculative decoding, its accept length with it.
    pub tokens_per_step: f64,
}

/// Decayed weighted sums of the regression.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sums {
    /// Σ weight (steps).
    w: f64,
    /// Σ decay (intervals).
    count: f64,
    n: f64,
    k: f64,
    y: f64,
    nn: f64,
    nk: f64,
    kk: f64,
    ny: f64,
    ky: f64,
    yy: f64,
    /// Σ weight · tokens per step.
    g: f64,
}

impl Sums {
    fn scale(&mut self, f: f64) {
        let Self { w, count, n, k, y, nn, nk, kk, ny, ky, yy, g } = self;
        for v in [w, count, n, k, y, nn, nk, kk, ny, ky, yy, g] {
            *v *= f;
        }
    }
}

/// The forgetting regression of one worker.
#[derive(Clone, Debug)]
pub struct Regression {
    half_life: Duration,
    last: Option<Instant>,
    sums: Sums,
}

/// A solved fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Solution {
    /// Step time at no load, ms.
    pub base_ms: f64,
    /// Step time per request on the busiest rank, ms.
    pub ms_per_request: f64,
    /// Step time per million context tokens on the busiest rank, ms.
    pub ms_per_mtoken: f64,
    /// Share of the step time's variance the fit explains (weighted).
    pub r_squared: f64,
    /// Effective number of intervals (decayed).
    pub samples: f64,
    /// W = ms_per_request / ms per token: context tokens that cost as much as one request.
    pub weight_tokens: f64,
    /// Standard error of W relative to W (first order); infinite when a slope is not positive.
    pub weight_rel_se: f64,
    /// The operating point: weighted mean requests of the busiest rank.
    pub mean_requests: f64,
    /// The operating point: weighted mean context tokens of the busiest rank.
    pub mean_context_tokens: f64,
    /// Tokens a request gains per step (weighted mean, at least 1): a request's ITL is the
    /// step over this.
    pub tokens_per_step: f64,
}

impl Regression {
    /// An empty regression forgetting with `half_life`.
    pub fn new(half_life: Duration) -> Self {
        Self { half_life, last: None, sums: Sums::default() }
    }

    /// Adds one interval; older ones decay by the time since the last.
    pub fn add(&mut self, s: &Sample) {
        if !(s.steps > 0.0 && s.requests.is_finite() && s.context_tokens.is_finite() && s.step_ms.is_finite())
        {
            return;
        }
        if let Some(last) = self.last {
            let age = s.at.saturating_duration_since(last).as_secs_f64();
            let half = self.half_life.as_secs_f64().max(1e-9);
            self.sums.scale(0.5f64.powf(age / half));
        }
        self.last = Some(self.last.map_or(s.at, |l| l.max(s.at)));
        let (w, n, k, y) = (s.steps, s.requests, s.context_tokens / TOKENS_PER_UNIT, s.step_ms);
        let m = &mut self.sums;
        m.w += w;
        m.count += 1.0;
        m.n += w * n;
        m.k += w * k;
        m.y += w * y;
        m.nn += w * n * n;
        m.nk += w * n * k;
        m.kk += w * k * k;
        m.ny += w * n * y;
        m.ky += w * k * y;
        m.yy += w * y * y;
        m.g += w * if s.tokens_per_step.is_finite() { s.tokens_per_step.max(1.0) } else { 1.0 };
    }

    /// Effective number of intervals.
    pub fn samples(&self) -> f64 {
        self.sums.count
    }

    /// The fit, or `None` with fewer than four intervals, no spread in either input, or inputs
    /// so collinear that the two slopes cannot be told apart.
    pub fn solve(&self) -> Option<Solution> {
        let m = &self.sums;
        if m.count < 4.0 || m.w <= 0.0 {
            return None;
        }
        let (mn, mk, my) = (m.n / m.w, m.k / m.w, m.y / m.w);
        // Centred second moments per unit weight.
        let cnn = (m.nn / m.w - mn * mn).max(0.0);
        let ckk = (m.kk / m.w - mk * mk).max(0.0);
        let cnk = m.nk / m.w - mn * mk;
        let cny = m.ny / m.w - mn * my;
        let cky = m.ky / m.w - mk * my;
        let cyy = (m.yy / m.w - my * my).max(0.0);
        let det = cnn * ckk - cnk * cnk;
        // 1 − corr(n, k)² below 1e-6: the inputs move together, the slopes are not separable.
        if cnn <= 1e-12 || ckk <= 1e-12 || det <= 1e-6 * cnn * ckk {
            return None;
        }
        let b = (ckk * cny - cnk * cky) / det;
        let c = (cnn * cky - cnk * cny) / det;
        let ssr = (cyy - b * cny - c * cky).max(0.0);
        let r_squared = if cyy > 0.0 { (1.0 - ssr / cyy).clamp(0.0, 1.0) } else { 0.0 };
        // σ² per unit weight from the residuals over (intervals − 3 parameters); the slopes'
        // covariance is σ² (X'WX)⁻¹ with X'WX = Σw · C.
        let sigma2 = ssr * m.w / (m.count - 3.0).max(1.0);
        let scale = sigma2 / (m.w * det);
        let (var_b, var_c, cov_bc) = (scale * ckk, scale * cnn, -scale * cnk);
        let weight_rel_se = if b > 0.0 && c > 0.0 {
            (var_b / (b * b) + var_c / (c * c) - 2.0 * cov_bc / (b * c)).max(0.0).sqrt()
        } else {
            f64::INFINITY
        };
        Some(Solution {
            base_ms: my - b * mn - c * mk,
            ms_per_request: b,
            ms_per_mtoken: c,
            r_squared,
            samples: m.count,
            weight_tokens: if c > 0.0 { b / c * TOKENS_PER_UNIT } else { f64::INFINITY },
            weight_rel_se,
            mean_requests: mn,
            mean_context_tokens: mk * TOKENS_PER_UNIT,
            tokens_per_step: (m.g / m.w).max(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t0: Instant, i: u64, n: f64, k: f64, y: f64) -> Sample {
        Sample {
            at: t0 + Duration::from_millis(100 * i),
            requests: n,
            context_tokens: k,
            step_ms: y,
            steps: 3.0,
            tokens_per_step: 1.0,
        }
    }

    /// The sim's step below the knee: 31.2 + 1.55 (n + k / 1.05 M).
    fn step(n: f64, k: f64) -> f64 {
        31.2 + 1.55 * (n + k / 1.05e6)
    }

    /// Intervals `from..from + 40` with requests cycling 4..=7, context independently over
    /// 100 k – 600 k tokens, and the sim's step at `w` tokens per request.
    fn spread(r: &mut Regression, t0: Instant, from: u64, w: f64) {
        for i in from..from + 40 {
            let n = 4.0 + (i % 4) as f64;
            let k = 100_000.0 + 50_000.0 * ((i * 7) % 11) as f64;
            r.add(&sample(t0, i, n, k, 31.2 + 1.55 * (n + k / w)));
        }
    }

    #[test]
    fn exact_inputs_are_recovered_exactly() {
        let mut r = Regression::new(Duration::from_secs(60));
        spread(&mut r, Instant::now(), 0, 1.05e6);
        let s = r.solve().unwrap();
        assert!((s.weight_tokens - 1.05e6).abs() < 1.0, "{s:?}");
        assert!((s.ms_per_request - 1.55).abs() < 1e-9 && (s.base_ms - 31.2).abs() < 1e-7, "{s:?}");
        assert!(s.r_squared > 0.999_999 && s.weight_rel_se < 1e-6, "{s:?}");
    }

    #[test]
    fn collinear_inputs_have_no_solution() {
        let t0 = Instant::now();
        let mut r = Regression::new(Duration::from_secs(60));
        // Every request holds 100 k tokens: context says nothing the request count does not.
        for i in 0..40u64 {
            let n = 4.0 + (i % 4) as f64;
            r.add(&sample(t0, i, n, 100_000.0 * n, step(n, 100_000.0 * n)));
        }
        assert_eq!(r.solve(), None);
        // Neither does a constant input.
        let mut r = Regression::new(Duration::from_secs(60));
        for i in 0..40u64 {
            let k = 100_000.0 * (i % 5) as f64;
            r.add(&sample(t0, i, 6.0, k, step(6.0, k)));
        }
        assert_eq!(r.solve(), None);
    }

    #[test]
    fn too_few_intervals_have_no_solution() {
        let t0 = Instant::now();
        let mut r = Regression::new(Duration::from_secs(60));
        for i in 0..3u64 {
            r.add(&sample(t0, i, i as f64, 1e5 * (3 - i) as f64, 40.0));
        }
        assert_eq!(r.solve(), None);
    }

    #[test]
    fn old_intervals_fade() {
        let t0 = Instant::now();
        let mut r = Regression::new(Duration::from_secs(1));
        spread(&mut r, t0, 0, 2e5);
        spread(&mut r, t0, 1_000, 1.05e6); // 96 s later: the first regime weighs 2^-96
        let s = r.solve().unwrap();
        assert!((s.weight_tokens / 1.05e6 - 1.0).abs() < 1e-3, "{s:?}");
        assert!(s.samples < 40.0 / (1.0 - 0.5f64.powf(0.1)) + 1.0);
    }
}

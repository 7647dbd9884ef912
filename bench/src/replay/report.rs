//! The replay report: throughput, TTFT, inter-token latency and interactivity over the measured
//! (non-warm-up, completed) requests, with the load shaping that produced them.
//!
//! - **Window**: from the first measured request's send to the last measured request's end.
//!   tok/s = streamed output tokens / window; requests/s = completed requests / window.
//! - **TTFT**: send → first non-empty content chunk, per request.
//! - **ITL**: every gap between consecutive content chunks, pooled over all requests.
//! - **Interactivity**: per request, 1000 / (that request's mean ITL in ms), i.e. the tokens/s
//!   one user sees once streaming starts; requests with fewer than two chunks have none.
//! - **Percentiles**: linear interpolation between order statistics (numpy's default): the
//!   p-th percentile of sorted `x[0..n]` is at rank `p/100 · (n−1)`, interpolated between the
//!   two neighbouring values.

use serde_json::{Value, json};

use super::schedule::Shaping;

/// One completed request, in milliseconds from the run's start.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Sample {
    pub(crate) sent_ms: f64,
    pub(crate) ttft_ms: f64,
    pub(crate) end_ms: f64,
    /// Gaps between consecutive content chunks.
    pub(crate) gaps_ms: Vec<f64>,
    /// Output tokens (`usage.completion_tokens`, else content chunks).
    pub(crate) tokens: u64,
}

/// The p-th percentile (0–100) of `values`, by linear interpolation; `None` when empty.
pub(crate) fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = p.clamp(0.0, 100.0) / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// p50, p90 (and mean) of a metric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Dist {
    pub(crate) p50: Option<f64>,
    pub(crate) p90: Option<f64>,
    pub(crate) mean: Option<f64>,
}

impl Dist {
    fn of(values: &[f64]) -> Self {
        Self { p50: percentile(values, 50.0), p90: percentile(values, 90.0), mean: mean(values) }
    }

    fn json(&self) -> Value {
        json!({"p50": self.p50, "p90": self.p90, "mean": self.mean})
    }
}

/// What a replay measured.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Report {
    pub(crate) trace: String,
    pub(crate) mode: &'static str,
    pub(crate) shaping: Shaping,
    pub(crate) completed: usize,
    pub(crate) failed: usize,
    pub(crate) warmup: usize,
    pub(crate) window_s: f64,
    pub(crate) output_tokens: u64,
    pub(crate) tokens_per_s: f64,
    pub(crate) requests_per_s: f64,
    pub(crate) ttft_ms: Dist,
    pub(crate) itl_ms: Dist,
    pub(crate) interactivity: Dist,
}

impl Report {
    /// Summarises the measured `samples`; `failed` and `warmup` are counted only.
    pub(crate) fn new(
        trace: String,
        mode: &'static str,
        shaping: Shaping,
        samples: &[Sample],
        failed: usize,
        warmup: usize,
    ) -> Self {
        let first = samples.iter().map(|s| s.sent_ms).fold(f64::INFINITY, f64::min);
        let last = samples.iter().map(|s| s.end_ms).fold(f64::NEG_INFINITY, f64::max);
        let window_s = if samples.is_empty() { 0.0 } else { (last - first).max(0.0) / 1e3 };
        let output_tokens = samples.iter().map(|s| s.tokens).sum();
        let rate = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
        let ttft: Vec<f64> = samples.iter().map(|s| s.ttft_ms).collect();
        let gaps: Vec<f64> = samples.iter().flat_map(|s| s.gaps_ms.iter().copied()).collect();
        let interactivity: Vec<f64> =
            samples.iter().filter_map(|s| mean(&s.gaps_ms)).filter(|&m| m > 0.0).map(|m| 1e3 / m).collect();
        Self {
            trace,
            mode,
            shaping,
            completed: samples.len(),
            failed,
            warmup,
            window_s,
            output_tokens,
            tokens_per_s: rate(output_tokens as f64),
            requests_per_s: rate(samples.len() as f64),
            ttft_ms: Dist::of(&ttft),
            itl_ms: Dist::of(&gaps),
            interactivity: Dist::of(&interactivity),
        }
    }

    pub(crate) fn json(&self) -> Value {
        let s = &self.shaping;
        json!({
            "trace": self.trace,
            "mode": self.mode,
            "shaping": {
                "speedup": s.speedup,
                "think_time_scale": s.think_time_scale,
                "output_scale": s.output_scale,
                "idle_gap_cap_s": s.idle_gap_cap_s,
                "concurrency": s.concurrency,
                "warmup_per_lane": s.warmup_per_lane,
                "max_requests": s.max_requests,
                "duration_s": s.duration_s,
            },
            "percentiles": "linear interpolation between order statistics (numpy default)",
            "completed": self.completed,
            "failed": self.failed,
            "warmup_excluded": self.warmup,
            "window_s": self.window_s,
            "output_tokens": self.output_tokens,
            "tokens_per_s": self.tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "ttft_ms": self.ttft_ms.json(),
            "itl_ms": self.itl_ms.json(),
            "interactivity_tok_per_s": self.interactivity.json(),
        })
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.shaping;
        let o = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let opt = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
        writeln!(f, "replay {} ({} loop)", self.trace, self.mode)?;
        writeln!(
            f,
            "  shaping: speedup {} · think-time-scale {} · output-scale {} · idle-gap-cap {} s · concurrency {} · warmup/lane {} · max-requests {} · duration {}",
            s.speedup,
            s.think_time_scale,
            s.output_scale,
            s.idle_gap_cap_s,
            s.concurrency,
            s.warmup_per_lane,
            opt(s.max_requests.map(|m| m.to_string())),
            opt(s.duration_s.map(|d| format!("{d} s"))),
        )?;
        writeln!(
            f,
            "  requests: {} completed, {} failed, {} warm-up excluded; window {:.2} s",
            self.completed, self.failed, self.warmup, self.window_s
        )?;
        writeln!(
            f,
            "  throughput: {:.1} tok/s, {:.2} requests/s ({} output tokens)",
            self.tokens_per_s, self.requests_per_s, self.output_tokens
        )?;
        writeln!(
            f,
            "  TTFT ms: p50 {} p90 {} mean {}",
            o(self.ttft_ms.p50),
            o(self.ttft_ms.p90),
            o(self.ttft_ms.mean)
        )?;
        writeln!(f, "  ITL ms: p50 {} p90 {}", o(self.itl_ms.p50), o(self.itl_ms.p90))?;
        write!(
            f,
            "  interactivity tok/s per user (1000 / mean ITL): p50 {} p90 {}",
            o(self.interactivity.p50),
            o(self.interactivity.p90)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_linearly() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(percentile(&v, 50.0), Some(5.5));
        assert!((percentile(&v, 90.0).unwrap() - 9.1).abs() < 1e-9);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.0), Some(1.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 100.0), Some(3.0));
        assert_eq!(percentile(&[7.0], 90.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn report_rates_and_interactivity() {
        let a =
            Sample { sent_ms: 0.0, ttft_ms: 100.0, end_ms: 1_000.0, gaps_ms: vec![10.0, 30.0], tokens: 3 };
        let b = Sample { sent_ms: 500.0, ttft_ms: 300.0, end_ms: 2_000.0, gaps_ms: vec![5.0], tokens: 2 };
        let shaping = super::super::schedule::tests::shaping();
        let r = Report::new("t".into(), "closed", shaping, &[a, b], 1, 4);
        assert_eq!((r.completed, r.failed, r.warmup, r.window_s), (2, 1, 4, 2.0));
        assert_eq!((r.tokens_per_s, r.requests_per_s), (2.5, 1.0));
        assert_eq!((r.ttft_ms.p50, r.ttft_ms.mean), (Some(200.0), Some(200.0)));
        assert_eq!(r.itl_ms.p50, Some(10.0));
        // Per request 1000/20 = 50 and 1000/5 = 200 tok/s.
        assert_eq!(r.interactivity.p50, Some(125.0));
        assert_eq!(r.json()["shaping"]["concurrency"], 2);
        assert!(r.to_string().contains("speedup 1"));
    }
}

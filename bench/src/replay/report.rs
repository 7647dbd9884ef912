//! The replay report: throughput, TTFT, inter-token latency and interactivity over the measured
//! (non-warm-up, completed) requests, with the load shaping that produced them.
//!
//! - **Time**: against an emulated engine ([`Shaping::compression`] `c` > 1) every measured
//!   time is multiplied by `c` and every rate divided by it, so the report is in emulated time.
//! - **Window**: from the first measured request's send to the last measured request's end.
//!   tok/s = streamed output tokens / window; in+out tok/s adds the prompt tokens
//!   (`usage.prompt_tokens`), which is what tok/s/GPU counts in the original study and InferenceX;
//!   requests/s = completed requests / window.
//! - **TTFT**: send → first non-empty content chunk, per request.
//! - **ITL**: per request, (last content chunk − first) / (output tokens − 1), AgentX's
//!   (aiperf's) inter-token latency: a chunk may carry several tokens (MTP), so this is per
//!   token. Requests with fewer than two chunks have none.
//! - **Interactivity**: 1000 / ITL, the tokens/s one user sees once streaming starts. Its p50 and
//!   p90 are 1000 / the ITL p50 and p90, as the original study and InferenceX report it: **p90 is the
//!   slow side**.
//! - **Chunk gaps**: every gap between consecutive content chunks, pooled (a decode step each
//!   on SGLang and the sim).
//! - **Decode ranks** (when sampled, [`super::ranks`]): over the samples in the window.
//! - **Percentiles**: linear interpolation between order statistics ([`super::percentile`]).

use infera_sim::params::TimingParams;
use serde_json::{Value, json};

use super::percentile::percentile;
use super::ranks::{RankSample, RankStats, series_json};
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
    /// Prompt tokens (`usage.prompt_tokens`, else the trace's).
    pub(crate) input_tokens: u64,
    /// The service class it named, if any.
    pub(crate) class: Option<super::goodput::Class>,
}

impl Sample {
    /// Every time multiplied by `c`.
    fn scaled(&self, c: f64) -> Self {
        Self {
            sent_ms: self.sent_ms * c,
            ttft_ms: self.ttft_ms * c,
            end_ms: self.end_ms * c,
            gaps_ms: self.gaps_ms.iter().map(|g| g * c).collect(),
            ..*self
        }
    }

    /// What goodput counts of it.
    fn served(&self) -> super::goodput::Served {
        let tokens = self.tokens + self.input_tokens;
        super::goodput::Served { class: self.class, ttft_ms: self.ttft_ms, itl_ms: self.itl_ms(), tokens }
    }

    /// Per-token ITL: decode time / (tokens − 1); `None` below two chunks.
    pub(crate) fn itl_ms(&self) -> Option<f64> {
        let decode: f64 = self.gaps_ms.iter().sum();
        (self.tokens >= 2 && decode > 0.0).then(|| decode / (self.tokens - 1) as f64)
    }
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
    pub(crate) fn of(values: &[f64]) -> Self {
        Self { p50: percentile(values, 50.0), p90: percentile(values, 90.0), mean: mean(values) }
    }

    /// 1000 / each of `itl`'s (interactivity from ITL: p90 maps to p90, the slow side).
    fn per_second(itl: &Self, values: &[f64]) -> Self {
        let inv = |v: Option<f64>| v.filter(|&v| v > 0.0).map(|v| 1e3 / v);
        let each: Vec<f64> = values.iter().filter(|&&v| v > 0.0).map(|v| 1e3 / v).collect();
        Self { p50: inv(itl.p50), p90: inv(itl.p90), mean: mean(&each) }
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
    /// Requests cut at the end of a fixed window (in no other number).
    pub(crate) cut: usize,
    /// The window, in (emulated) ms from the run's start.
    pub(crate) window_ms: (f64, f64),
    pub(crate) window_s: f64,
    pub(crate) output_tokens: u64,
    pub(crate) input_tokens: u64,
    pub(crate) tokens_per_s: f64,
    /// Input + output tokens per second.
    pub(crate) total_tokens_per_s: f64,
    pub(crate) requests_per_s: f64,
    pub(crate) ttft_ms: Dist,
    pub(crate) itl_ms: Dist,
    pub(crate) interactivity: Dist,
    pub(crate) chunk_gap_ms: Dist,
    /// The decode ranks in the window, when sampled.
    pub(crate) ranks: Option<RankStats>,
    /// Every rank sample of the run (emulated ms), warm-up included.
    pub(crate) rank_series: Vec<RankSample>,
    /// Goodput per service class, when the requests named classes.
    pub(crate) goodput: Option<super::goodput::Goodput>,
}

impl Report {
    /// Summarises the measured `samples` (wall times; scaled by the shaping's compression);
    /// `failed` and `warmup` are counted only.
    pub(crate) fn new(
        trace: String,
        mode: &'static str,
        shaping: Shaping,
        samples: &[Sample],
        failed: usize,
        warmup: usize,
    ) -> Self {
        let samples: Vec<Sample> = samples.iter().map(|s| s.scaled(shaping.compression)).collect();
        let first = samples.iter().map(|s| s.sent_ms).fold(f64::INFINITY, f64::min);
        let last = samples.iter().map(|s| s.end_ms).fold(f64::NEG_INFINITY, f64::max);
        let window_ms = if samples.is_empty() { (0.0, 0.0) } else { (first, last.max(first)) };
        let window_s = (window_ms.1 - window_ms.0) / 1e3;
        let output_tokens = samples.iter().map(|s| s.tokens).sum();
        let input_tokens = samples.iter().map(|s| s.input_tokens).sum::<u64>();
        let rate = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
        let ttft: Vec<f64> = samples.iter().map(|s| s.ttft_ms).collect();
        let gaps: Vec<f64> = samples.iter().flat_map(|s| s.gaps_ms.iter().copied()).collect();
        let itl: Vec<f64> = samples.iter().filter_map(Sample::itl_ms).collect();
        let itl_ms = Dist::of(&itl);
        Self {
            trace,
            mode,
            completed: samples.len(),
            failed,
            warmup,
            cut: 0,
            window_ms,
            window_s,
            output_tokens,
            input_tokens,
            tokens_per_s: rate(output_tokens as f64),
            total_tokens_per_s: rate((output_tokens + input_tokens) as f64),
            requests_per_s: rate(samples.len() as f64),
            ttft_ms: Dist::of(&ttft),
            interactivity: Dist::per_second(&itl_ms, &itl),
            itl_ms,
            chunk_gap_ms: Dist::of(&gaps),
            ranks: None,
            rank_series: Vec::new(),
            goodput: super::goodput::Goodput::of(
                &samples.iter().map(Sample::served).collect::<Vec<_>>(),
                window_s,
            ),
            shaping,
        }
    }

    /// Adds the decode ranks sampled during the run (wall ms; scaled like the requests):
    /// stats over the window, the whole series kept. `params`: the emulated engine's timing,
    /// for the modelled step.
    pub(crate) fn with_ranks(mut self, samples: Vec<RankSample>, params: Option<&TimingParams>) -> Self {
        let c = self.shaping.compression;
        self.rank_series = samples.into_iter().map(|s| RankSample { at_ms: s.at_ms * c, ..s }).collect();
        let (from, to) = self.window_ms;
        let inside: Vec<RankSample> =
            self.rank_series.iter().filter(|s| (from..=to).contains(&s.at_ms)).cloned().collect();
        self.ranks = Some(RankStats::of(&inside, params));
        self
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
                "warmup_s": s.warmup_s,
                "cut_at_end": s.cut_at_end,
                "max_requests": s.max_requests,
                "duration_s": s.duration_s,
                "time_compression": s.compression,
            },
            "percentiles": "linear interpolation between order statistics (numpy default)",
            "completed": self.completed,
            "failed": self.failed,
            "warmup_excluded": self.warmup,
            "cut_at_end": self.cut,
            "window_s": self.window_s,
            "window_start_s": self.window_ms.0 / 1e3,
            "output_tokens": self.output_tokens,
            "input_tokens": self.input_tokens,
            "tokens_per_s": self.tokens_per_s,
            "input_output_tokens_per_s": self.total_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "ttft_ms": self.ttft_ms.json(),
            "itl_ms": self.itl_ms.json(),
            "itl_definition": "per request (last chunk - first chunk) / (output tokens - 1)",
            "interactivity_tok_per_s": self.interactivity.json(),
            "interactivity_definition": "1000 / ITL; p50 and p90 are 1000 / ITL p50 and p90 (p90 = the slow side)",
            "chunk_gap_ms": self.chunk_gap_ms.json(),
            "decode_ranks": self.ranks.as_ref().map(RankStats::json),
            "decode_rank_series": (!self.rank_series.is_empty()).then(|| series_json(&self.rank_series)),
            "goodput": self.goodput.as_ref().map(super::goodput::Goodput::json),
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
            "  shaping: speedup {} · think-time-scale {} · output-scale {} · idle-gap-cap {} s · concurrency {} · warmup/lane {} · warmup {} s · max-requests {} · duration {}{} · time-compression {}",
            s.speedup,
            s.think_time_scale,
            s.output_scale,
            s.idle_gap_cap_s,
            s.concurrency,
            s.warmup_per_lane,
            s.warmup_s,
            opt(s.max_requests.map(|m| m.to_string())),
            opt(s.duration_s.map(|d| format!("{d} s"))),
            if s.cut_at_end { " (cut at the end)" } else { "" },
            s.compression,
        )?;
        writeln!(
            f,
            "  requests: {} completed, {} failed, {} warm-up excluded, {} cut at the end; window {:.2} s",
            self.completed, self.failed, self.warmup, self.cut, self.window_s
        )?;
        writeln!(
            f,
            "  throughput: {:.1} tok/s out, {:.1} tok/s in+out, {:.2} requests/s ({} output tokens)",
            self.tokens_per_s, self.total_tokens_per_s, self.requests_per_s, self.output_tokens
        )?;
        writeln!(
            f,
            "  TTFT ms: p50 {} p90 {} mean {}",
            o(self.ttft_ms.p50),
            o(self.ttft_ms.p90),
            o(self.ttft_ms.mean)
        )?;
        writeln!(
            f,
            "  ITL ms (per token, per request): p50 {} p90 {}",
            o(self.itl_ms.p50),
            o(self.itl_ms.p90)
        )?;
        writeln!(
            f,
            "  interactivity tok/s per user (1000 / ITL; p90 = slow side): p50 {} p90 {}",
            o(self.interactivity.p50),
            o(self.interactivity.p90)
        )?;
        write!(f, "  chunk gaps ms: p50 {} p90 {}", o(self.chunk_gap_ms.p50), o(self.chunk_gap_ms.p90))?;
        if let Some(r) = &self.ranks {
            let step = r.step_ms_p50.map_or_else(String::new, |m| format!(", step median (model) {m:.1} ms"));
            write!(
                f,
                "\n  decode ranks ({} samples): running per rank {:.2}, busiest median / p90 {} / {}, requests busiest/mean {:.2} / {:.2}, context busiest/mean {:.2} / {:.2}{step}",
                r.samples,
                r.running_per_rank,
                o(r.busiest.p50),
                o(r.busiest.p90),
                r.requests_ratio.p50.unwrap_or(f64::NAN),
                r.requests_ratio.p90.unwrap_or(f64::NAN),
                r.context_ratio.p50.unwrap_or(f64::NAN),
                r.context_ratio.p90.unwrap_or(f64::NAN),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_rates_and_interactivity() {
        let a = Sample {
            sent_ms: 0.0,
            ttft_ms: 100.0,
            end_ms: 1_000.0,
            gaps_ms: vec![10.0, 30.0],
            tokens: 5,
            input_tokens: 1_000,
            class: None,
        };
        let b = Sample {
            sent_ms: 500.0,
            ttft_ms: 300.0,
            end_ms: 2_000.0,
            gaps_ms: vec![5.0],
            tokens: 2,
            input_tokens: 3_000,
            class: None,
        };
        let one_chunk =
            Sample { sent_ms: 600.0, ttft_ms: 50.0, end_ms: 700.0, tokens: 4, ..Sample::default() };
        let shaping = super::super::schedule::tests::shaping();
        let r = Report::new("t".into(), "closed", shaping, &[a, b, one_chunk], 1, 4);
        assert_eq!((r.completed, r.failed, r.warmup, r.window_s), (3, 1, 4, 2.0));
        assert_eq!((r.tokens_per_s, r.requests_per_s, r.total_tokens_per_s), (5.5, 1.5, 2_005.5));
        assert_eq!((r.ttft_ms.p50, r.ttft_ms.mean), (Some(100.0), Some(150.0)));
        assert_eq!(r.chunk_gap_ms.p50, Some(10.0));
        // Per token: a 40 ms over 4 tokens = 10 ms, b 5 ms over 1; one chunk has no ITL.
        assert_eq!((r.itl_ms.p50, r.itl_ms.p90), (Some(7.5), Some(9.5)));
        // Interactivity from the ITL percentiles: p90 is the slow side.
        assert_eq!(r.interactivity.p50, Some(1e3 / 7.5));
        assert_eq!(r.interactivity.p90, Some(1e3 / 9.5));
        assert!(r.interactivity.p90 < r.interactivity.p50);
        assert_eq!(r.interactivity.mean, Some(150.0), "(100 + 200) / 2");
        assert_eq!(r.json()["shaping"]["concurrency"], 2);
        assert!(r.to_string().contains("speedup 1"));
    }

    #[test]
    fn compression_scales_times_and_rates_and_ranks_keep_to_the_window() {
        let a = Sample {
            sent_ms: 100.0,
            ttft_ms: 10.0,
            end_ms: 200.0,
            gaps_ms: vec![1.0, 1.0],
            tokens: 3,
            input_tokens: 7,
            class: None,
        };
        let shaping = Shaping { compression: 10.0, ..super::super::schedule::tests::shaping() };
        let ranks =
            |at_ms| RankSample { at_ms, running: vec![4, 2], tokens: vec![10, 10], workers: Vec::new() };
        let r = Report::new("t".into(), "closed", shaping, &[a], 0, 0)
            .with_ranks(vec![ranks(50.0), ranks(150.0), ranks(250.0)], None);
        assert_eq!((r.window_ms, r.window_s), ((1_000.0, 2_000.0), 1.0));
        assert_eq!((r.ttft_ms.p50, r.itl_ms.p50, r.tokens_per_s), (Some(100.0), Some(10.0), 3.0));
        assert_eq!(r.rank_series.iter().map(|s| s.at_ms).collect::<Vec<_>>(), vec![500.0, 1_500.0, 2_500.0]);
        let stats = r.ranks.as_ref().unwrap();
        assert_eq!((stats.samples, stats.running_per_rank), (1, 3.0));
        assert_eq!(r.json()["decode_rank_series"]["running"][0], json!([4, 2]));
        assert!(r.to_string().contains("busiest median / p90 4.0 / 4.0"), "{r}");
    }
}

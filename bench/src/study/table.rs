//! The original study's two tables, as Markdown: one row per arm.
//!
//! 1. `--decode-request-weight | tok/s/GPU | requests (per s) | interactivity p50 / p90 |
//!    TTFT p50 / p90 / mean | ITL p50 / p90` — tok/s/GPU counts input + output tokens over the
//!    deployment's GPUs, as the original study and InferenceX do.
//! 2. `weight | running per rank | busiest median / p90 | requests busiest / mean (median / p90) |
//!    context busiest / mean (median / p90) | step median` — the decode ranks over the window.
//! 3. [`versus`]: each arm over its runs (mean, and the runs' range) against the best peer arm
//!    of the same cell, paired run by run with 95 % intervals — a peer is SMG or one of infera's
//!    legacy policies (without one, the fixed weights `auto` is measured against), the best is
//!    the one with the highest mean p90 interactivity — and the verdict on the recommended arm.

use std::fmt::{self, Write as _};

use rand::SeedableRng as _;
use rand::rngs::SmallRng;

use super::arm::Arm;
use super::numbers::thousands;
use super::stats::{self, RatioInterval};
use crate::replay::report::Report;

fn num(v: Option<f64>, digits: usize) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

fn secs(ms: Option<f64>) -> Option<f64> {
    ms.map(|m| m / 1e3)
}

/// The original study's results table.
pub(crate) fn results(rows: &[(Label, &Report)], gpus: u32) -> String {
    let mut out = String::from(
        "| --decode-request-weight | tok/s/GPU | requests (per s) | interactivity p50 / p90 | TTFT p50 / p90 / mean | ITL p50 / p90 |\n\
         |---|---|---|---|---|---|\n",
    );
    for (arm, r) in rows {
        let per_gpu = r.total_tokens_per_s / f64::from(gpus.max(1));
        let _ = writeln!(
            out,
            "| {} | {} | {} ({:.2}) | {} / {} | {} / {} / {} s | {} / {} ms |",
            arm,
            thousands(per_gpu.round()),
            thousands(r.completed as f64),
            r.requests_per_s,
            num(r.interactivity.p50, 1),
            num(r.interactivity.p90, 1),
            num(secs(r.ttft_ms.p50), 2),
            num(secs(r.ttft_ms.p90), 2),
            num(secs(r.ttft_ms.mean), 2),
            num(r.itl_ms.p50, 1),
            num(r.itl_ms.p90, 1),
        );
    }
    out
}

/// Goodput per arm (`--batch-share`): requests that met their class's TTFT and ITL targets;
/// `None` when the replay named no classes.
pub(crate) fn goodput(rows: &[(Label, &Report)], gpus: u32) -> Option<String> {
    if rows.iter().all(|(_, r)| r.goodput.is_none()) {
        return None;
    }
    let mut out = String::from(
        "| arm | goodput (req/s) | interactive met / completed | batch met / completed | tok/s/GPU within SLO | failed |\n\
         |---|---|---|---|---|---|\n",
    );
    for (arm, r) in rows {
        let Some(g) = &r.goodput else { continue };
        let tokens = (g.interactive.tokens_per_s + g.batch.tokens_per_s) / f64::from(gpus.max(1));
        let _ = writeln!(
            out,
            "| {} | {:.3} | {} / {} | {} / {} | {} | {} |",
            arm,
            g.per_s(),
            g.interactive.met,
            g.interactive.completed,
            g.batch.met,
            g.batch.completed,
            thousands(tokens.round()),
            r.failed,
        );
    }
    Some(out)
}

/// The original study's decode-ranks table.
pub(crate) fn ranks(rows: &[(Label, &Report)]) -> String {
    let mut out = String::from(
        "| weight | running per rank | busiest median / p90 | requests busiest / mean (median / p90) | context busiest / mean (median / p90) | step median |\n\
         |---|---|---|---|---|---|\n",
    );
    for (arm, r) in rows {
        let Some(s) = &r.ranks else {
            let _ = writeln!(out, "| {} | – | – | – | – | – |", arm);
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {:.2} | {} / {} | {} / {} | {} / {} | {} ms |",
            arm,
            s.running_per_rank,
            num(s.busiest.p50, 0),
            num(s.busiest.p90, 0),
            num(s.requests_ratio.p50, 2),
            num(s.requests_ratio.p90, 2),
            num(s.context_ratio.p50, 2),
            num(s.context_ratio.p90, 2),
            num(s.step_ms_p50, 1),
        );
    }
    out
}

/// Each arm over its runs against the best peer arm of the cell (a peer is SMG or one of
/// infera's legacy policies; the best is the one with the highest mean p90 interactivity among
/// those that ran every run — a screen drops the others after run 1 — and serve within
/// [`stats::THROTTLED_SHARE`] of the best-serving one's tok/s/GPU), paired run by run: the
/// ratio of the means with its paired-bootstrap 95 % interval ([`stats`]). Without a peer, the
/// fixed weights are the reference (what `auto` is measured against). The last line is the
/// verdict on `recommended`.
pub(crate) fn versus(rows: &[(Label, &Report)], gpus: u32, recommended: Arm, speedup: f64) -> String {
    let mut arms: Vec<Arm> = Vec::new();
    for (l, _) in rows {
        if !arms.contains(&l.arm) {
            arms.push(l.arm);
        }
    }
    let runs_of = |arm: Arm| rows.iter().filter(move |(l, _)| l.arm == arm).count();
    let most = arms.iter().map(|a| runs_of(*a)).max().unwrap_or(0);
    // Run number → value, for one metric of one arm.
    let series = |arm: Arm, metric: &dyn Fn(&Report) -> Option<f64>| -> Vec<(usize, f64)> {
        rows.iter()
            .filter(|(l, _)| l.arm == arm)
            .filter_map(|(l, r)| Some((l.run.unwrap_or(1), metric(r)?)))
            .collect()
    };
    let p90 = |r: &Report| r.interactivity.p90;
    let per_gpu = |r: &Report| Some(r.total_tokens_per_s / f64::from(gpus.max(1)));
    let ttft = |r: &Report| r.ttft_ms.p90;
    // An arm's mean of one metric over its runs.
    let mean_of = |arm: Arm, metric: &dyn Fn(&Report) -> Option<f64>| {
        let v: Vec<f64> = series(arm, metric).into_iter().map(|(_, x)| x).collect();
        (!v.is_empty()).then(|| stats::mean(&v))
    };
    let mean_p90 = |arm: Arm| mean_of(arm, &p90);
    // A reference ran every run and serves the load (its tok/s/GPU within
    // `THROTTLED_SHARE` of the best-serving candidate's).
    let best = |of: &dyn Fn(&Arm) -> bool| {
        let full: Vec<Arm> = arms.iter().copied().filter(|a| of(a) && runs_of(*a) == most).collect();
        let serving = stats::serves_the_load(
            &full.iter().map(|a| mean_of(*a, &per_gpu).unwrap_or(0.0)).collect::<Vec<_>>(),
        );
        full.iter()
            .zip(serving)
            .filter(|(_, serves)| *serves)
            .filter_map(|(a, _)| Some((*a, mean_p90(*a)?)))
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(a, _)| a)
    };
    let (peer, what) = match best(&Arm::is_peer) {
        Some(p) => (Some(p), "peer"),
        None => (best(&|a| matches!(a, Arm::Weight(_) | Arm::Phased { .. })), "fixed-W"),
    };
    let mut rng = SmallRng::seed_from_u64(BOOTSTRAP_SEED);
    let mut interval = |arm: Arm, metric: &dyn Fn(&Report) -> Option<f64>| -> Option<RatioInterval> {
        stats::paired_by_run(&series(arm, metric), &series(peer?, metric), &mut rng)
    };
    let cell = |i: Option<RatioInterval>| {
        i.map_or_else(|| "–".to_owned(), |i| format!("{:.3} [{:.3}, {:.3}]", i.ratio, i.low, i.high))
    };
    let mut out = match peer {
        Some(p) => {
            format!(
                "Over the paired runs, against the best {what} arm ({p}; the highest mean p90 among those that ran every run and serve within {:.0} % of the best-serving one's tok/s/GPU), with 95 % intervals:\n\n",
                stats::THROTTLED_SHARE * 100.0
            )
        }
        None => "Over the runs:\n\n".to_owned(),
    };
    out.push_str(
        "| arm | runs | load view age (emulated s) | interactivity p90, mean (min–max) | × best [95 % CI] | tok/s/GPU × best | TTFT p90 × best |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mut verdict = None;
    for &arm in &arms {
        let all: Vec<f64> = series(arm, &p90).into_iter().map(|(_, x)| x).collect();
        let (lo, hi) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let vs = interval(arm, &p90);
        if arm == recommended {
            verdict = vs;
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ({}–{}) | {} | {} | {} |",
            Label { arm, run: None },
            all.len(),
            arm.load_view(speedup),
            num(mean_p90(arm), 1),
            num(Some(lo), 1),
            num(Some(hi), 1),
            cell(vs),
            cell(interval(arm, &per_gpu)),
            cell(interval(arm, &ttft)),
        );
    }
    if let (Some(v), Some(p)) = (verdict, peer) {
        let _ = writeln!(
            out,
            "\nVerdict: {recommended} at {} the best {what} arm ({p}) in p90 interactivity; the interval's lower bound is {} 1.",
            v.describe(),
            if v.low > 1.0 { "above" } else { "not above" }
        );
    }
    out
}

/// The bootstrap's seed: the same rows give the same intervals.
const BOOTSTRAP_SEED: u64 = 0xb007;

/// A row's name: the arm (a weight as the original study's column has it: `1,000,000`), and which run
/// of it when an arm ran more than once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Label {
    pub(crate) arm: Arm,
    /// 1-based; `None` when there is one run.
    pub(crate) run: Option<usize>,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.arm {
            Arm::Weight(w) => f.write_str(&thousands(w))?,
            other => write!(f, "{other}")?,
        }
        match self.run {
            Some(n) => write!(f, " · run {n}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ranks::RankSample;
    use crate::replay::report::Sample;
    use crate::replay::schedule::tests::shaping;

    #[test]
    fn one_row_per_arm_in_the_seeds_columns() {
        let s = Sample {
            sent_ms: 0.0,
            ttft_ms: 2_000.0,
            end_ms: 4_000.0,
            gaps_ms: vec![40.0; 3],
            tokens: 13,
            input_tokens: 11_987,
            class: None,
        };
        let r = Report::new("t".into(), "closed", shaping(), &[s], 0, 0).with_ranks(
            vec![RankSample { at_ms: 1_000.0, running: vec![6, 2], tokens: vec![3, 1], workers: Vec::new() }],
            None,
        );
        let arms = [Arm::Weight(1e6), "round-robin".parse().unwrap()];
        let mut rows: Vec<(Label, &Report)> =
            arms.iter().map(|&arm| (Label { arm, run: None }, &r)).collect();
        rows[1].0.run = Some(2);
        let t = results(&rows, 12);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        // (13 + 11,987) tokens over 4 s on 12 GPUs = 250; ITL 120 / 12 = 10 ms → 100 tok/s.
        assert_eq!(
            lines[2],
            "| 1,000,000 | 250 | 1 (0.25) | 100.0 / 100.0 | 2.00 / 2.00 / 2.00 s | 10.0 / 10.0 ms |"
        );
        assert!(lines[3].starts_with("| round-robin (legacy) · run 2 |"));
        // Paired by run: both rows are run 1.
        let paired: Vec<(Label, &Report)> =
            rows.iter().map(|(l, r)| (Label { run: None, ..*l }, *r)).collect();
        let v = versus(&paired, 12, Arm::Weight(1e6), 10.0);
        assert!(
            v.starts_with(
                "Over the paired runs, against the best peer arm (round-robin (legacy); the highest mean p90"
            ),
            "{v}"
        );
        assert_eq!(
            v.lines().nth(4),
            Some(
                "| 1,000,000 | 1 | 0 (ledger; KV room polled every 0.1 s) | 100.0 (100.0–100.0) | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] |"
            ),
            "{v}"
        );
        assert!(
            v.contains("Verdict: W = 1,000,000 at 1.000× [1.000, 1.000] (1 runs) the best peer arm"),
            "{v}"
        );
        assert!(v.contains("lower bound is not above 1."), "{v}");
        let k = ranks(&rows);
        assert_eq!(k.lines().nth(2), Some("| 1,000,000 | 4.00 | 6 / 6 | 1.50 / 1.50 | 1.50 / 1.50 | – ms |"));
    }
}

//! The seeds' two tables, as Markdown: one row per arm.
//!
//! 1. `--decode-request-weight | tok/s/GPU | requests (per s) | interactivity p50 / p90 |
//!    TTFT p50 / p90 / mean | ITL p50 / p90` — tok/s/GPU counts input + output tokens over the
//!    deployment's GPUs, as the seeds and InferenceX do.
//! 2. `weight | running per rank | busiest median / p90 | requests busiest / mean (median / p90) |
//!    context busiest / mean (median / p90) | step median` — the decode ranks over the window.
//! 3. [`versus`]: each arm over its runs (mean, and the runs' range) against the best peer arm
//!    of the same cell — a peer is SMG or one of infera's legacy policies (without one, the
//!    fixed weights `auto` is measured against), the best is the one with the highest mean p90
//!    interactivity.

use std::fmt::{self, Write as _};

use super::arm::{Arm, thousands};
use crate::replay::report::Report;

fn num(v: Option<f64>, digits: usize) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

fn secs(ms: Option<f64>) -> Option<f64> {
    ms.map(|m| m / 1e3)
}

/// The seeds' results table.
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

/// The seeds' decode-ranks table.
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

/// Each arm's mean over its runs, and as a ratio to the best peer's (or, without a peer arm,
/// the best fixed W's): `arm | runs | p90 interactivity mean (min–max) | × best | tok/s/GPU ×
/// best | TTFT p90 × best`.
pub(crate) fn versus(rows: &[(Label, &Report)], gpus: u32) -> String {
    let mut arms: Vec<Arm> = Vec::new();
    for (l, _) in rows {
        if !arms.contains(&l.arm) {
            arms.push(l.arm);
        }
    }
    let runs = |arm: Arm| rows.iter().filter(move |(l, _)| l.arm == arm).map(|(_, r)| *r);
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let p90 = |arm| mean(runs(arm).filter_map(|r| r.interactivity.p90).collect());
    let per_gpu = |arm| mean(runs(arm).map(|r| r.total_tokens_per_s / f64::from(gpus.max(1))).collect());
    let ttft = |arm| mean(runs(arm).filter_map(|r| r.ttft_ms.p90).collect());
    let best = |of: &dyn Fn(&Arm) -> bool| {
        arms.iter()
            .copied()
            .filter(|a| of(a))
            .filter_map(|a| Some((a, p90(a)?)))
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(a, _)| a)
    };
    // The peers (SMG, infera's legacy policies); without one, the fixed weights (what `auto`
    // is measured against).
    let (peer, what) = match best(&|a| matches!(a, Arm::Legacy(_) | Arm::Smg(_))) {
        Some(p) => (Some(p), "peer"),
        None => (best(&|a| matches!(a, Arm::Weight(_) | Arm::Phased { .. })), "fixed-W"),
    };
    let mut out = match peer {
        Some(p) => format!("Over the runs, against the best {what} arm ({p}):\n\n"),
        None => "Over the runs:\n\n".to_owned(),
    };
    out.push_str(
        "| arm | runs | interactivity p90, mean (min–max) | × best | tok/s/GPU × best | TTFT p90 × best |\n\
         |---|---|---|---|---|---|\n",
    );
    let ratio = |v: Option<f64>, of: Option<f64>| match (v, of) {
        (Some(v), Some(of)) if of > 0.0 => format!("{:.3}", v / of),
        _ => "–".to_owned(),
    };
    for &arm in &arms {
        let all: Vec<f64> = runs(arm).filter_map(|r| r.interactivity.p90).collect();
        let (lo, hi) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}–{}) | {} | {} | {} |",
            Label { arm, run: None },
            all.len(),
            num(p90(arm), 1),
            num(Some(lo), 1),
            num(Some(hi), 1),
            ratio(p90(arm), peer.and_then(p90)),
            ratio(per_gpu(arm), peer.and_then(per_gpu)),
            ratio(ttft(arm), peer.and_then(ttft)),
        );
    }
    out
}

/// A row's name: the arm (a weight as the seeds' column has it: `1,000,000`), and which run
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
        let v = versus(&rows, 12);
        assert!(v.starts_with("Over the runs, against the best peer arm (round-robin (legacy)):"), "{v}");
        assert_eq!(
            v.lines().nth(4),
            Some("| 1,000,000 | 1 | 100.0 (100.0–100.0) | 1.000 | 1.000 | 1.000 |"),
            "{v}"
        );
        let k = ranks(&rows);
        assert_eq!(k.lines().nth(2), Some("| 1,000,000 | 4.00 | 6 / 6 | 1.50 / 1.50 | 1.50 / 1.50 | – ms |"));
    }
}

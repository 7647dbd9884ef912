//! The seeds' two tables, as Markdown: one row per arm.
//!
//! 1. `--decode-request-weight | tok/s/GPU | requests (per s) | interactivity p50 / p90 |
//!    TTFT p50 / p90 / mean | ITL p50 / p90` — tok/s/GPU counts input + output tokens over the
//!    deployment's GPUs, as the seeds and InferenceX do.
//! 2. `weight | running per rank | busiest median / p90 | requests busiest / mean (median / p90) |
//!    context busiest / mean (median / p90) | step median` — the decode ranks over the window.

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
        let k = ranks(&rows);
        assert_eq!(k.lines().nth(2), Some("| 1,000,000 | 4.00 | 6 / 6 | 1.50 / 1.50 | 1.50 / 1.50 | – ms |"));
    }
}

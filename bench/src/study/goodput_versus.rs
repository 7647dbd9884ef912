//! Goodput over the paired runs (`--batch-share` with `--runs` above 1): each arm's mean goodput
//! and its range, and its ratio to the best peer arm's (a peer is SMG or one of infera's legacy
//! policies; the best is the one that ran every run with the highest mean goodput), paired run
//! by run with a 95 % interval ([`stats`]); the tokens served within their class's targets
//! likewise. Unlike [`super::table::versus`] no peer is set aside for serving less: goodput
//! already counts only what was served in time.

use std::fmt::Write as _;

use rand::SeedableRng as _;
use rand::rngs::SmallRng;

use super::arm::Arm;
use super::stats::{self, RatioInterval};
use super::table::Label;
use crate::replay::goodput::Goodput;
use crate::replay::report::Report;

/// The bootstrap's seed: the same rows give the same intervals.
const BOOTSTRAP_SEED: u64 = 0x600d;

/// The table, or `None` when no row has goodput.
pub(crate) fn versus(rows: &[(Label, &Report)], gpus: u32) -> Option<String> {
    if rows.iter().all(|(_, r)| r.goodput.is_none()) {
        return None;
    }
    let mut arms: Vec<Arm> = Vec::new();
    for (l, _) in rows {
        if !arms.contains(&l.arm) {
            arms.push(l.arm);
        }
    }
    // Run number → value, for one figure of one arm's goodput.
    let series = |arm: Arm, figure: &dyn Fn(&Goodput) -> f64| -> Vec<(usize, f64)> {
        rows.iter()
            .filter(|(l, _)| l.arm == arm)
            .filter_map(|(l, r)| Some((l.run.unwrap_or(1), figure(r.goodput.as_ref()?))))
            .collect()
    };
    let requests = |g: &Goodput| g.per_s();
    let tokens = |g: &Goodput| (g.interactive.tokens_per_s + g.batch.tokens_per_s) / f64::from(gpus.max(1));
    let values = |arm: Arm, figure: &dyn Fn(&Goodput) -> f64| -> Vec<f64> {
        series(arm, figure).into_iter().map(|(_, v)| v).collect()
    };
    let most = arms.iter().map(|a| series(*a, &requests).len()).max().unwrap_or(0);
    let peer =
        arms.iter().copied().filter(|a| a.is_peer() && series(*a, &requests).len() == most).max_by(|a, b| {
            stats::mean(&values(*a, &requests)).total_cmp(&stats::mean(&values(*b, &requests)))
        });
    let mut rng = SmallRng::seed_from_u64(BOOTSTRAP_SEED);
    let mut interval = |arm: Arm, figure: &dyn Fn(&Goodput) -> f64| -> Option<RatioInterval> {
        stats::paired_by_run(&series(arm, figure), &series(peer?, figure), &mut rng)
    };
    let cell = |i: Option<RatioInterval>| {
        i.map_or_else(|| "–".to_owned(), |i| format!("{:.3} [{:.3}, {:.3}]", i.ratio, i.low, i.high))
    };
    let mut out = match peer {
        Some(p) => format!(
            "Goodput over the paired runs, against the best peer arm ({p}; the highest mean goodput among those that ran every run), with 95 % intervals:\n\n"
        ),
        None => "Goodput over the runs:\n\n".to_owned(),
    };
    out.push_str(
        "| arm | runs | goodput (req/s), mean (min–max) | × best peer [95 % CI] | tok/s/GPU within SLO × best peer |\n\
         |---|---|---|---|---|\n",
    );
    for &arm in &arms {
        let all = values(arm, &requests);
        if all.is_empty() {
            continue;
        }
        let (lo, hi) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} ({lo:.3}–{hi:.3}) | {} | {} |",
            Label { arm, run: None },
            all.len(),
            stats::mean(&all),
            cell(interval(arm, &requests)),
            cell(interval(arm, &tokens)),
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::goodput::ClassGoodput;
    use crate::replay::schedule::tests::shaping;

    fn report(interactive: f64, batch: f64) -> Report {
        let mut r = Report::new("t".into(), "closed", shaping(), &[], 0, 0);
        let class = |per_s: f64| ClassGoodput { completed: 10, met: 5, per_s, tokens_per_s: 1_000.0 * per_s };
        r.goodput = Some(Goodput { interactive: class(interactive), batch: class(batch) });
        r
    }

    #[test]
    fn each_arm_against_the_peer_with_the_most_goodput_paired_by_run() {
        let ours = [report(1.0, 0.5), report(0.9, 0.3)];
        let rr = [report(0.4, 0.1), report(0.5, 0.1)];
        let smg = [report(0.8, 0.2), report(0.6, 0.4)];
        let auto: Arm = "auto/admission".parse().unwrap();
        let smg_arm: Arm = "smg:least_load".parse().unwrap();
        let mut rows: Vec<(Label, &Report)> = Vec::new();
        for run in 0..2 {
            rows.push((Label { arm: auto, run: Some(run + 1) }, &ours[run]));
            rows.push((Label { arm: "round-robin".parse().unwrap(), run: Some(run + 1) }, &rr[run]));
            rows.push((Label { arm: smg_arm, run: Some(run + 1) }, &smg[run]));
        }
        let t = versus(&rows, 10).unwrap();
        assert!(t.contains(&format!("against the best peer arm ({smg_arm};")), "{t}");
        // Ours 1.5 and 1.2 req/s against SMG's 1.0 and 1.0: 1.35×, runs resampled in pairs.
        let line =
            t.lines().find(|l| l.starts_with(&format!("| {} |", Label { arm: auto, run: None }))).unwrap();
        assert!(
            line.starts_with(&format!(
                "| {} | 2 | 1.350 (1.200–1.500) | 1.350 [1.200, 1.500] | 1.350 [1.200, 1.500] |",
                Label { arm: auto, run: None }
            )),
            "{line}"
        );
        assert!(
            versus(
                &[(Label { arm: auto, run: None }, &Report::new("t".into(), "closed", shaping(), &[], 0, 0))],
                10
            )
            .is_none()
        );
    }
}

//! `attack`: the attack suite (`infera_testkit::attack`) with its floods `--factor` times the
//! suite's, against a fresh hardened deployment per run: per case, what was sent, what came
//! back, whether the attack failed as it must, and the peak RSS of control and each proxy during
//! the case, against their peak under the same number of ordinary requests measured first in
//! the same run.

use infera_testkit::attack::{self, PartRss, Report, Scale, Target, peak_rss_kib, reset_peak_rss};
use serde_json::json;

#[derive(clap::Args, Debug)]
pub(crate) struct AttackArgs {
    /// The floods (sockets, sessions, leases, guessed ids) this many times the suite's.
    #[arg(long, env = "INFERA_ATTACK_FACTOR", default_value_t = 10)]
    factor: usize,
    /// Runs, each on a fresh deployment.
    #[arg(long, env = "INFERA_ATTACK_RUNS", default_value_t = 3)]
    runs: usize,
    /// Ordinary requests of the baseline (its peak RSS is what the attacks are compared with).
    #[arg(long, env = "INFERA_ATTACK_BASELINE_REQUESTS", default_value_t = 200)]
    baseline_requests: usize,
}

pub(crate) fn run(args: AttackArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.factor >= 1 && args.runs >= 1, "--factor ≥ 1 and --runs ≥ 1");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(bench(args))
}

/// One run: each part's peak under ordinary requests, then each case's report.
struct Run {
    baseline: Vec<PartRss>,
    reports: Vec<Report>,
}

/// Peak RSS of each part while `requests` ordinary chat completions go through.
async fn baseline(target: &Target, requests: usize) -> anyhow::Result<Vec<PartRss>> {
    let pids = target.pids();
    pids.iter().for_each(|(_, pid)| reset_peak_rss(*pid));
    for chunk in (0..requests).collect::<Vec<_>>().chunks(8) {
        let calls = chunk.iter().map(|i| {
            let body = json!({"model": "m", "messages": [{"role": "user", "content": format!("hello {i}")}], "max_tokens": 8});
            async move { target.chat(&target.alice, &body).await }
        });
        for r in futures_util::future::join_all(calls).await {
            anyhow::ensure!(r?.0.is_success(), "a baseline request failed");
        }
    }
    Ok(pids.iter().map(|(name, pid)| PartRss { part: name.clone(), kib: peak_rss_kib(*pid) }).collect())
}

async fn bench(args: AttackArgs) -> anyhow::Result<()> {
    let scale = Scale::bench(args.factor);
    anyhow::ensure!(
        std::env::var_os("INFERA_BIN_DIR").is_some(),
        "set INFERA_BIN_DIR (cargo xtask bench attack does)"
    );
    println!(
        "attack: {} cases × {} runs; floods: {} sockets (cap {}), {} sessions (cap {}), {} leases (cap {}), {} guessed ids",
        attack::cases().len(),
        args.runs,
        scale.sockets,
        scale.max_connections,
        scale.sessions,
        scale.session_max,
        scale.leases,
        scale.max_leases,
        scale.guesses
    );
    let mut all: Vec<Run> = Vec::new();
    for run in 0..args.runs {
        let target = Target::start(&scale).await?;
        let base = baseline(&target, args.baseline_requests).await?;
        let shown: Vec<String> = base.iter().map(|p| format!("{} {:.1} MiB", p.part, p.mib())).collect();
        println!(
            "\nrun {}: baseline peak RSS over {} ordinary requests: {}",
            run + 1,
            args.baseline_requests,
            shown.join(", ")
        );
        let reports = attack::run(&target, &scale, attack::cases(), |r| {
            let peaks: Vec<String> = r
                .peak_rss
                .iter()
                .zip(&base)
                .map(|(p, b)| {
                    format!("{} {:.1} MiB (×{:.2})", p.part, p.mib(), p.kib as f64 / b.kib.max(1) as f64)
                })
                .collect();
            println!("  {:<28} {}", r.case, if r.safe() { "attack failed (safe)" } else { "BREACH" });
            println!("      sent: {}", r.sent);
            println!("      got:  {}", r.answered);
            println!("      peak RSS: {}", peaks.join(", "));
            for b in &r.breaches {
                println!("      breach: {b}");
            }
        })
        .await;
        all.push(Run { baseline: base, reports });
        target.cluster.stop().await?;
    }
    summary(&all);
    let breached = all.iter().flat_map(|run| &run.reports).filter(|r| !r.safe()).count();
    anyhow::ensure!(breached == 0, "{breached} cases succeeded as attacks");
    Ok(())
}

/// Per part: the highest peak of any case over every run, and its ratio to that run's baseline.
fn summary(all: &[Run]) {
    let cases = all.iter().map(|run| run.reports.len()).sum::<usize>();
    let breached = all.iter().flat_map(|run| &run.reports).filter(|r| !r.safe()).count();
    println!("\nsummary: {breached} of {cases} attacks succeeded");
    let Some(first) = all.first() else { return };
    for (i, part) in first.baseline.iter().enumerate() {
        let mut worst: Option<(f64, &PartRss, &str)> = None;
        for run in all {
            let base = run.baseline[i].kib.max(1) as f64;
            for r in &run.reports {
                let Some(peak) = r.peak_rss.get(i) else { continue };
                if worst.is_none_or(|w| peak.kib > w.1.kib) {
                    worst = Some((peak.kib as f64 / base, peak, r.case));
                }
            }
        }
        if let Some((ratio, peak, case)) = worst {
            println!(
                "  {}: highest peak {:.1} MiB (×{ratio:.2} its baseline) in {case}",
                part.part,
                peak.mib()
            );
        }
    }
}

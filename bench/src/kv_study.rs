//! `infera-bench kv-study`: KV-aware prefill routing on the Mooncake conversation trace, end to
//! end, against round-robin in the same run.
//!
//! Each arm gets a fresh deployment ([`deploy`]): N prefill sims with empty prefix caches that
//! tokenize with one model directory (a byte-level BPE made at run time) and publish KV events,
//! one decode sim, control and a proxy. The same trace window is replayed open loop against the
//! proxy (prompts synthesised so shared `hash_ids` are shared text, [`crate::replay::prompt`]).
//!
//! - **hit ratio**: prompt tokens the prefills found in their prefix caches ÷ prompt tokens, from
//!   the prefills' own request logs.
//! - **bound**: the trace's infinite-cache prefix reuse over the same requests, token-weighted:
//!   a block counts as a hit when any earlier request had it (one cache holding everything).
//! - TTFT p50/p90/mean from the replay.
//! - **on holder**: prefill picks that chose a candidate with the largest overlap ÷ picks where
//!   some candidate held pages of the prompt (from `Admin/WatchDecisions`).
//!
//! Arms: `cache-aware` (the proxy sends page hashes, control credits overlap) and `round-robin`
//! (`--prefill-policy round-robin`); the proxy tokenizes in both.

mod bound;
pub(crate) mod deploy;

use std::path::PathBuf;

use clap::Args as ClapArgs;
use serde_json::json;

use crate::replay::report::Report;
use crate::replay::schedule::Shaping;
use crate::replay::trace::{Format, Source};
use crate::replay::{Mode, Plan};
use bound::{Offline, infinite_cache_bound, offline_longest_prefix, requests};
use deploy::{Deployment, MODEL, Spec};

/// Flags of `infera-bench kv-study`.
#[derive(ClapArgs, Debug)]
pub(crate) struct Args {
    /// A Mooncake-format trace (`.jsonl` or `.jsonl.gz`); the default is the bench's built-in
    /// synthetic one (the real ones: `cargo xtask traces`, then
    /// `--trace traces/mooncake/conversation_trace.jsonl.gz`).
    #[arg(long, env = "INFERA_BENCH_TRACE", default_value = "builtin:mooncake")]
    trace: Source,
    /// Trace requests replayed per arm (the first ones).
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_REQUESTS", default_value_t = 1_000)]
    requests: usize,
    /// Prefill sims.
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_PREFILLS", default_value_t = 4)]
    prefills: usize,
    /// Trace time ÷ this (open-loop arrivals).
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_SPEEDUP", default_value_t = 1.0)]
    speedup: f64,
    /// The sims' time compression (`--sim-speedup`); reported times are emulated.
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_SIM_SPEEDUP", default_value_t = 5.0)]
    sim_speedup: f64,
    /// Output tokens = trace output × this (the study is about prefill).
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_OUTPUT_SCALE", default_value_t = 0.05)]
    output_scale: f64,
    /// KV page size of the prefills.
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_PAGE_SIZE", default_value_t = 16)]
    page_size: u32,
    /// `--prefill-overlap-credit` of a cache-aware arm's control; repeat (or comma-separate) for
    /// one cache-aware arm per value. Unset: one arm with control's default.
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_OVERLAP_CREDIT", value_delimiter = ',')]
    overlap_credit: Vec<f64>,
    /// Seed of control's tie-breaks and the sims.
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_SEED", default_value_t = 7)]
    seed: u64,
    /// Write every arm's numbers here as JSON.
    #[arg(long, env = "INFERA_BENCH_KV_STUDY_JSON")]
    json: Option<PathBuf>,
}

/// One arm's result.
struct ArmResult {
    name: String,
    picks: PickStats,
    hit_ratio: f64,
    per_prefill: Vec<u64>,
    report: Report,
}

/// Runs every arm and prints the table.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.prefills > 0 && args.requests > 0, "--prefills and --requests must be positive");
    args.trace.announce();
    let window = requests(&args)?;
    let (bound, offline) = (infinite_cache_bound(&window), offline_longest_prefix(&window, args.prefills));
    let dir = tempfile::tempdir()?;
    infera_tokenize::fixture::write_model_dir(dir.path(), 4_000)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // Both arms tokenize in the proxy, so both pay its encode time (which the replay's time
    // compression magnifies in the emulated TTFT) and differ only in the prefill choice.
    let mut arms: Vec<(String, Vec<String>, bool)> = match args.overlap_credit.as_slice() {
        [] => vec![("cache-aware".into(), vec![], true)],
        credits => credits
            .iter()
            .map(|c| {
                (format!("cache-aware ×{c}"), vec!["--prefill-overlap-credit".into(), c.to_string()], true)
            })
            .collect(),
    };
    arms.push(("round-robin".into(), vec!["--prefill-policy".into(), "round-robin".into()], true));
    let mut results = Vec::new();
    for (name, control_flags, proxy_tokenizes) in arms {
        eprintln!("kv-study: arm {name}");
        let spec = Spec {
            prefills: args.prefills,
            page_size: args.page_size,
            speedup: args.sim_speedup,
            seed: args.seed,
            control_flags,
            proxy_tokenizes,
        };
        results.push(rt.block_on(arm(&name, &spec, dir.path(), &args))?);
    }
    print_table(&args, bound, &offline, &results);
    if let Some(path) = &args.json {
        let arms: Vec<_> = results
            .iter()
            .map(|r| {
                json!({"arm": r.name, "hit_ratio": r.hit_ratio, "per_prefill_requests": r.per_prefill,
                       "prefill_picks": r.picks.picks, "picks_with_a_holder": r.picks.with_holder,
                       "picks_on_the_best_holder": r.picks.on_best_holder, "replay": r.report.json()})
            })
            .collect();
        let out = json!({"trace": args.trace.to_string(), "requests": args.requests, "prefills": args.prefills,
                         "infinite_cache_bound": bound,
                         "offline_longest_prefix": {"hit_ratio": offline.hit_ratio, "computed_tokens": offline.computed},
                         "arms": arms});
        std::fs::write(path, serde_json::to_string_pretty(&out)? + "\n")?;
    }
    Ok(())
}

async fn arm(name: &str, spec: &Spec, model_dir: &std::path::Path, args: &Args) -> anyhow::Result<ArmResult> {
    let deployment = Deployment::start(spec, model_dir).await?;
    let plan = Plan {
        batch_share: None,
        trace: args.trace.clone(),
        format: Format::Mooncake,
        urls: vec![deployment.proxy_url.clone()],
        model: MODEL.into(),
        mode: Some(Mode::Open),
        session_offset: 0,
        session_header: false,
        shaping: Shaping {
            speedup: args.speedup,
            think_time_scale: 1.0,
            output_scale: args.output_scale,
            idle_gap_cap_s: 300.0,
            concurrency: 1,
            warmup_per_lane: 0,
            warmup_s: 0.0,
            cut_at_end: false,
            max_requests: Some(args.requests),
            duration_s: None,
            compression: args.sim_speedup,
        },
        quiet: true,
        loads: None,
    };
    let watch = watch_prefill_decisions(&deployment.control_url).await?;
    let report = crate::replay::replay(&plan).await;
    let picks = watch.stop().await;
    let hits = deployment.prefill_hits().await;
    deployment.stop().await?;
    let (report, hits) = (report?, hits?);
    let (prompt, cached) = hits.iter().fold((0, 0), |(p, c), (hp, hc, _)| (p + hp, c + hc));
    eprintln!("kv-study: arm {name}: (prompt, cached, requests) per prefill {hits:?}; picks {picks:?}");
    anyhow::ensure!(prompt > 0, "arm {name}: no prefill finished");
    Ok(ArmResult {
        name: name.to_owned(),
        picks,
        hit_ratio: cached as f64 / prompt as f64,
        per_prefill: hits.iter().map(|h| h.2).collect(),
        report,
    })
}

/// How prefill picks related to what the index knew at the time.
#[derive(Clone, Copy, Debug, Default)]
struct PickStats {
    picks: u64,
    /// Picks where some candidate held pages of the prompt.
    with_holder: u64,
    /// Of those, picks that chose a candidate with the largest overlap.
    on_best_holder: u64,
}

/// Collects prefill decisions from `Admin/WatchDecisions` until stopped.
struct Watch {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<PickStats>,
}

impl Watch {
    async fn stop(self) -> PickStats {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

async fn watch_prefill_decisions(control: &str) -> anyhow::Result<Watch> {
    use infera_proto::pb::{self, admin_client::AdminClient};
    let mut admin = AdminClient::connect(control.to_owned()).await?;
    let req = pb::WatchDecisionsRequest { kind: pb::PickKind::Prefill as i32, model: MODEL.into() };
    let mut stream = admin.watch_decisions(req).await?.into_inner();
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut s = PickStats::default();
        loop {
            let d = tokio::select! {
                _ = &mut stopped => return s,
                d = stream.message() => match d {
                    Ok(Some(d)) => d,
                    _ => return s,
                },
            };
            s.picks += 1;
            let best = d.candidates.iter().map(|c| c.overlap_pages).max().unwrap_or(0);
            if best > 0 {
                s.with_holder += 1;
                let chosen = d.chosen.as_ref();
                let held =
                    d.candidates.iter().find(|c| c.target.as_ref() == chosen).map_or(0, |c| c.overlap_pages);
                s.on_best_holder += u64::from(held == best);
            }
        }
    });
    Ok(Watch { stop, task })
}

fn print_table(args: &Args, bound: f64, offline: &Offline, results: &[ArmResult]) {
    println!(
        "kv-study: {} Mooncake requests, {} prefill sims (page {}), arrivals ×{}; infinite-cache bound {:.3}",
        args.requests, args.prefills, args.page_size, args.speedup, bound
    );
    let (lo, hi) = (offline.computed.iter().min(), offline.computed.iter().max());
    let spread = lo.zip(hi).map_or(0.0, |(lo, hi)| (*hi - *lo) as f64 / (*hi).max(1) as f64);
    println!(
        "offline over {} caches, longest prefix else least computed (no timing): hit {:.3} ({:.3} of the bound), work spread {:.1} %",
        offline.computed.len(),
        offline.hit_ratio,
        offline.hit_ratio / bound,
        spread * 100.0
    );
    println!(
        "{:<16} {:>7} {:>7} {:>6} {:>10} {:>10} {:>10} {:>6} {:>12}  requests per prefill",
        "arm", "hit", "÷bound", "done", "TTFT p50", "TTFT p90", "TTFT mean", "failed", "on holder"
    );
    for r in results {
        let t = &r.report.ttft_ms;
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} ms"));
        println!(
            "{:<16} {:>7.3} {:>7.3} {:>6} {:>10} {:>10} {:>10} {:>6} {:>12}  {:?}",
            r.name,
            r.hit_ratio,
            r.hit_ratio / bound,
            r.report.completed,
            ms(t.p50),
            ms(t.p90),
            ms(t.mean),
            r.report.failed,
            format!("{}/{}", r.picks.on_best_holder, r.picks.with_holder),
            r.per_prefill
        );
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// A Mooncake-format trace: `(timestamp ms, input tokens, hash ids)` per line.
    fn trace(rows: &[(u64, u32, &[u64])]) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(".jsonl").tempfile().unwrap();
        for (ts, input, ids) in rows {
            let line = json!({"timestamp": ts, "input_length": input, "output_length": 8, "hash_ids": ids});
            writeln!(f, "{line}").unwrap();
        }
        f
    }

    fn args(path: &std::path::Path, requests: usize) -> Args {
        Args {
            trace: Source::File(path.to_owned()),
            requests,
            prefills: 2,
            speedup: 1.0,
            sim_speedup: 20.0,
            output_scale: 0.5,
            page_size: 16,
            seed: 7,
            overlap_credit: Vec::new(),
            json: None,
        }
    }

    #[test]
    fn without_a_trace_it_runs_on_the_builtin_mooncake_trace() {
        use clap::Parser as _;
        let parsed = crate::Args::try_parse_from(["infera-bench", "kv-study"]).unwrap();
        let crate::Cmd::KvStudy(a) = parsed.command else { panic!("not kv-study") };
        assert_eq!(a.trace, Source::Builtin(crate::replay::trace::Builtin::Mooncake));
        // The default window is the whole built-in trace, with prefixes to find.
        let window = requests(&a).unwrap();
        assert_eq!(window.len(), a.requests);
        let bound = infinite_cache_bound(&window);
        assert!((0.2..0.7).contains(&bound), "{bound}");
    }

    #[test]
    fn the_bound_counts_tokens_of_blocks_seen_before() {
        let t = trace(&[(0, 1024, &[0, 1]), (10, 700, &[0, 2]), (20, 1200, &[0, 1, 3]), (30, 512, &[9])]);
        // Hits: request 2's block 0 (512), request 3's blocks 0 and 1 (1,024) of 3,436 tokens.
        let bound = infinite_cache_bound(&requests(&args(t.path(), 4)).unwrap());
        assert!((bound - 1536.0 / 3436.0).abs() < 1e-12, "{bound}");
        let first_two = infinite_cache_bound(&requests(&args(t.path(), 2)).unwrap());
        assert!((first_two - 512.0 / 1724.0).abs() < 1e-12, "{first_two}");
        // A block first seen partly (188 tokens of block 2) counts only that part later.
        let t = trace(&[(0, 700, &[0, 2]), (10, 1024, &[0, 2])]);
        let bound = infinite_cache_bound(&requests(&args(t.path(), 2)).unwrap());
        assert!((bound - (512.0 + 188.0) / 1724.0).abs() < 1e-12, "{bound}");
    }

    #[test]
    fn offline_routing_keeps_prefixes_longer_than_the_shared_first_block_together() {
        let t = trace(&[(0, 1024, &[0, 1]), (10, 700, &[0, 2]), (20, 1200, &[0, 1, 3]), (30, 512, &[9])]);
        let window = requests(&args(t.path(), 4)).unwrap();
        // One cache holds everything: the bound itself.
        let one = offline_longest_prefix(&window, 1);
        assert_eq!((one.hit_ratio, one.computed.clone()), (infinite_cache_bound(&window), vec![1_900]));
        // Two: request 2 shares only block 0 and goes to the idle cache; request 3 follows its
        // prefix [0, 1] to cache 0; request 4 goes to the cache that computed less.
        let two = offline_longest_prefix(&window, 2);
        assert_eq!(two.computed, vec![1_024 + 176, 700 + 512]);
        assert!((two.hit_ratio - 1_024.0 / 3_436.0).abs() < 1e-12, "{two:?}");
    }

    /// Three "conversations" of two turns; each second turn shares three 512-token blocks with its
    /// first and comes 20 trace seconds later (after the first's KV events reached control), in
    /// the order that makes round-robin (0, 1, 0 then 1, 0, 1) miss every time.
    #[test]
    fn cache_aware_routing_finds_the_shared_prefixes_round_robin_misses() {
        let rows: Vec<(u64, u32, Vec<u64>)> = (0..6u64)
            .map(|i| {
                let (conv, turn) = (i % 3, i / 3);
                (turn * 20_000 + conv * 3_000, 1_600, vec![10 * conv, 10 * conv + 1, 10 * conv + 2, 100 + i])
            })
            .collect();
        let rows: Vec<(u64, u32, &[u64])> = rows.iter().map(|(t, n, ids)| (*t, *n, ids.as_slice())).collect();
        let t = trace(&rows);
        let a = args(t.path(), 6);
        let dir = tempfile::tempdir().unwrap();
        infera_tokenize::fixture::write_model_dir(dir.path(), 1_000).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let spec = |control_flags: Vec<String>| Spec {
            prefills: 2,
            page_size: 16,
            speedup: a.sim_speedup,
            seed: 7,
            control_flags,
            proxy_tokenizes: true,
        };
        let aware = rt.block_on(arm("cache-aware", &spec(vec![]), dir.path(), &a)).unwrap();
        let rr = rt
            .block_on(arm(
                "round-robin",
                &spec(vec!["--prefill-policy".into(), "round-robin".into()]),
                dir.path(),
                &a,
            ))
            .unwrap();
        assert_eq!((aware.report.completed, rr.report.completed), (6, 6));
        assert_eq!(rr.per_prefill, vec![3, 3]);
        assert_eq!((aware.picks.with_holder, aware.picks.on_best_holder), (3, 3), "{:?}", aware.picks);
        // Round-robin never finds a first turn's pages; cache-aware sends every second turn where
        // its first one went.
        assert_eq!(rr.hit_ratio, 0.0, "the order defeats round-robin");
        assert!(aware.hit_ratio > 0.0);
        let bound = infinite_cache_bound(&requests(&a).unwrap());
        assert!(aware.hit_ratio > 0.8 * bound, "{} vs bound {bound}", aware.hit_ratio);
    }
}

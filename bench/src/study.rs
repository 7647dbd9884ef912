//! `infera-bench study decode-weight`: the seeds' decode request-weight study on the emulated
//! engine. For each load point and each arm (W = 0, 180,000, 1,000,000 and the legacy
//! round-robin and power-of-two by default) a **fresh** in-process 1P1D deployment
//! ([`deploy`]) replays the same trace window with the same seed through the proxy, while the
//! decode's per-rank load is sampled from its `/v1/loads` at a fixed emulated interval. It
//! prints the seeds' two tables per load point ([`table`]), writes every arm to `study.json`,
//! and draws the plots ([`plot`]) under `--out`. An `smg:POLICY` arm puts SMG ([`smg`]) in
//! front of the same sims instead of control and the proxy, and reports SMG's own counters.
//!
//! Load points: `published` replays the trace as it is (think time and output lengths ×1,
//! idle gaps capped at 300 s like AgentX); `seed` is `--match-seed-load` (the seeds' ≈ 9 s
//! think time and ≈ 1,000 output tokens, see [`crate::replay::seed_load`]). Time is compressed:
//! the sims run `--speedup` times faster than the wall clock and the replay divides its waits
//! by the same factor, so every number is reported in emulated time.

mod arm;
pub(crate) mod deploy;
#[cfg(test)]
mod e2e;
mod plot;
mod smg;
mod table;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use arm::Arm;
use deploy::Routing;
use infera_sim::params::TimingParams;
use serde_json::{Value, json};

use crate::replay::report::Report;
use crate::replay::schedule::Shaping;
use crate::replay::seed_load::{self, SeedLoad};
use crate::replay::trace::Format;
use crate::replay::{Loads, Mode, Plan};

/// `infera-bench study …`.
#[derive(clap::Args, Debug)]
pub(crate) struct StudyArgs {
    #[command(subcommand)]
    study: Which,
}

#[derive(clap::Subcommand, Debug)]
enum Which {
    /// The decode request weight W against token-only demand and the legacy policies.
    DecodeWeight(DecodeWeightArgs),
}

/// A load point of the study.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoadPoint {
    /// The trace as published (scales 1).
    Published,
    /// `--match-seed-load`: the seeds' operating point.
    Seed,
}

impl LoadPoint {
    fn name(self) -> &'static str {
        match self {
            LoadPoint::Published => "published",
            LoadPoint::Seed => "seed",
        }
    }
}

/// `study decode-weight` flags.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DecodeWeightArgs {
    /// The agentic trace (session JSONL, optionally `.gz`).
    #[arg(long, env = "INFERA_BENCH_TRACE")]
    trace: PathBuf,
    /// Load points, each with every arm.
    #[arg(
        long,
        env = "INFERA_BENCH_LOADS",
        value_enum,
        value_delimiter = ',',
        default_value = "published,seed"
    )]
    loads: Vec<LoadPoint>,
    /// Arms: request weights (demand on), `W/pP`, legacy policies (demand off), and SMG
    /// (`smg:round_robin|power_of_two|least_load|cache_aware`, `:no-overload` to add
    /// `--disable-worker-overload-protection`).
    #[arg(
        long,
        env = "INFERA_BENCH_ARMS",
        value_delimiter = ',',
        default_value = "0,180000,1000000,round-robin,power-of-two"
    )]
    arms: Vec<Arm>,
    /// Concurrent sessions (the seeds: 88).
    #[arg(long, env = "INFERA_BENCH_CONCURRENCY", default_value_t = 88)]
    concurrency: usize,
    /// Trace gaps are capped at this many seconds (AgentX: 300).
    #[arg(long, env = "INFERA_BENCH_IDLE_GAP_CAP_S", default_value_t = 300.0)]
    idle_gap_cap_s: f64,
    /// Requests per lane left out of the measurement.
    #[arg(long, env = "INFERA_BENCH_WARMUP_PER_LANE", default_value_t = 0)]
    warmup_per_lane: usize,
    /// Requests sent in each arm's first this many emulated seconds are warm-up (the cold first
    /// turns of 88 sessions take minutes of prefill).
    #[arg(long, env = "INFERA_BENCH_WARMUP_S", default_value_t = 400.0)]
    warmup_s: f64,
    /// Emulated seconds per arm; what is still in flight at the end is cut (a fixed window).
    #[arg(long, env = "INFERA_BENCH_DURATION_S", default_value_t = 1_000.0)]
    duration_s: f64,
    /// Requests per arm, warm-up included (default: no limit).
    #[arg(long, env = "INFERA_BENCH_MAX_REQUESTS")]
    max_requests: Option<usize>,
    /// Time compression: the sims' `--sim-speedup`; the replay's waits are divided by it.
    #[arg(long, env = "INFERA_BENCH_SPEEDUP", default_value_t = 25.0)]
    speedup: f64,
    /// Emulated seconds between readings of the decode's `/v1/loads`.
    #[arg(long, env = "INFERA_BENCH_SAMPLE_INTERVAL_S", default_value_t = 1.0)]
    sample_interval_s: f64,
    /// Seed of control's tie-breaks and the sims.
    #[arg(long, env = "INFERA_BENCH_SEED", default_value_t = 1)]
    seed: u64,
    /// Attention-DP ranks of the decode sim.
    #[arg(long, env = "INFERA_BENCH_DECODE_RANKS", default_value_t = 8)]
    decode_ranks: u32,
    /// The prefill's prefix cache, tokens (the kit's HiCache: 4 × 250 GB / 70,272 B per token).
    #[arg(long, env = "INFERA_BENCH_PREFILL_CACHE_TOKENS", default_value_t = 14_230_000)]
    prefill_cache_tokens: u64,
    /// GPUs tok/s/GPU divides by (the seeds' 1P1D: 4 prefill + 8 decode).
    #[arg(long, env = "INFERA_BENCH_GPUS", default_value_t = 12)]
    gpus: u32,
    /// The `smg` SMG arms run (default: `.venv/bin/smg` of the workspace, `cargo xtask setup`).
    #[arg(long, env = "INFERA_SMG")]
    smg: Option<PathBuf>,
    /// Where `study.json`, the plots and the SMG arms' logs go.
    #[arg(long, env = "INFERA_BENCH_OUT", default_value = "target/study")]
    out: PathBuf,
    /// No progress line on stderr.
    #[arg(long, env = "INFERA_BENCH_QUIET")]
    quiet: bool,
}

/// One arm's outcome.
pub(crate) struct ArmRun {
    pub(crate) arm: Arm,
    pub(crate) report: Report,
    /// What the router says it did (control's picks, or SMG's counters).
    pub(crate) routing: Routing,
    pub(crate) wall_s: f64,
}

/// One load point's arms.
pub(crate) struct LoadRun {
    pub(crate) load: LoadPoint,
    pub(crate) shaping: Shaping,
    pub(crate) seed_load: Option<SeedLoad>,
    pub(crate) arms: Vec<ArmRun>,
}

pub(crate) fn run(args: StudyArgs) -> anyhow::Result<()> {
    let Which::DecodeWeight(args) = args.study;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let started = Instant::now();
    let loads = rt.block_on(decode_weight(&args))?;
    let path = write_outputs(&args, &loads)?;
    println!(
        "wrote {} and the plots beside it ({:.0} s wall in all)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

impl DecodeWeightArgs {
    fn validate(&self) -> anyhow::Result<()> {
        for (name, v) in [
            ("--speedup", self.speedup),
            ("--duration-s", self.duration_s),
            ("--sample-interval-s", self.sample_interval_s),
            ("--idle-gap-cap-s", self.idle_gap_cap_s + 1.0),
            ("--warmup-s", self.warmup_s + 1.0),
        ] {
            anyhow::ensure!(v.is_finite() && v > 0.0, "{name} must be positive");
        }
        anyhow::ensure!(
            self.concurrency > 0 && !self.arms.is_empty() && !self.loads.is_empty(),
            "nothing to run"
        );
        anyhow::ensure!(
            self.decode_ranks > 0 && self.gpus > 0,
            "--decode-ranks and --gpus must be at least 1"
        );
        Ok(())
    }

    fn shaping(&self, load: LoadPoint) -> anyhow::Result<(Shaping, Option<SeedLoad>)> {
        let mut shaping = Shaping {
            speedup: 1.0,
            think_time_scale: 1.0,
            output_scale: 1.0,
            idle_gap_cap_s: self.idle_gap_cap_s,
            concurrency: self.concurrency,
            warmup_per_lane: self.warmup_per_lane,
            warmup_s: self.warmup_s,
            cut_at_end: true,
            max_requests: self.max_requests,
            duration_s: Some(self.duration_s),
            compression: self.speedup,
        };
        if load == LoadPoint::Published {
            return Ok((shaping, None));
        }
        let m = seed_load::from_trace(&self.trace, Format::Agentic, self.concurrency, self.idle_gap_cap_s)?;
        (shaping.think_time_scale, shaping.output_scale) = (m.think_time_scale, m.output_scale);
        Ok((shaping, Some(m)))
    }
}

/// Runs every load point and arm, printing each load point's tables as it completes.
pub(crate) async fn decode_weight(args: &DecodeWeightArgs) -> anyhow::Result<Vec<LoadRun>> {
    args.validate()?;
    let mut loads = Vec::new();
    for &load in &args.loads {
        let (shaping, seed_load) = args.shaping(load)?;
        println!("== load point: {} ({})", load.name(), describe(&shaping));
        if let Some(m) = &seed_load {
            println!("   {m}");
        }
        let mut arms = Vec::new();
        for &arm in &args.arms {
            let run = run_arm(args, arm, load, &shaping)
                .await
                .with_context(|| format!("{} arm {arm}", load.name()))?;
            eprintln!(
                "   {arm}: {} measured, {} warm-up, {} failed, {} cut at the end; {:.0} s wall",
                run.report.completed, run.report.warmup, run.report.failed, run.report.cut, run.wall_s
            );
            arms.push(run);
        }
        let rows: Vec<(Arm, &Report)> = arms.iter().map(|a| (a.arm, &a.report)).collect();
        println!("\n{}", table::results(&rows, args.gpus));
        println!(
            "Decode ranks over the measured window (/v1/loads every {} s emulated):\n",
            args.sample_interval_s
        );
        println!("{}", table::ranks(&rows));
        print_smg(&arms, args.speedup);
        loads.push(LoadRun { load, shaping, seed_load, arms });
    }
    Ok(loads)
}

/// What each SMG arm's SMG did, under the tables.
fn print_smg(arms: &[ArmRun], speedup: f64) {
    let mut any = false;
    for a in arms {
        if let Routing::Smg { counters, .. } = &a.routing {
            any = true;
            println!("{}: {}", a.arm, counters.line());
        }
    }
    if any {
        println!(
            "(SMG's load monitor polls every {} s of wall clock, its default, = {} emulated s at {speedup}× compression; its other timers are wall-clock too.)\n",
            smg::LOAD_MONITOR_INTERVAL_S,
            smg::LOAD_MONITOR_INTERVAL_S * speedup
        );
    }
}

async fn run_arm(
    args: &DecodeWeightArgs,
    arm: Arm,
    load: LoadPoint,
    shaping: &Shaping,
) -> anyhow::Result<ArmRun> {
    let started = Instant::now();
    if matches!(arm, Arm::Smg(_)) {
        std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    }
    let spec = deploy::Spec {
        arm,
        speedup: args.speedup,
        seed: args.seed,
        decode_ranks: args.decode_ranks,
        prefill_cache_tokens: args.prefill_cache_tokens,
        smg: args.smg.clone(),
        smg_log: args.out.join(format!("smg-{}-{}.log", load.name(), arm.key())),
    };
    let deployment = deploy::Deployment::start(&spec).await?;
    let picks_at_start = deployment.decode_picks().await?;
    let plan = Plan {
        trace: args.trace.clone(),
        format: Format::Agentic,
        url: deployment.url.clone(),
        model: deploy::MODEL.to_owned(),
        mode: Some(Mode::Closed),
        shaping: shaping.clone(),
        quiet: args.quiet,
        loads: Some(Loads {
            url: deployment.decode_url.clone(),
            interval_s: args.sample_interval_s,
            model: Some(TimingParams::default()),
        }),
    };
    let report = crate::replay::replay(&plan).await;
    let routing = deployment.routing(picks_at_start).await;
    deployment.stop().await?;
    Ok(ArmRun { arm, report: report?, routing: routing?, wall_s: started.elapsed().as_secs_f64() })
}

fn describe(s: &Shaping) -> String {
    format!(
        "think-time ×{:.3}, output length ×{:.3}, idle-gap cap {} s, concurrency {}, warm-up {} s + {}/lane, {} s emulated per arm (cut at the end), time compression {}",
        s.think_time_scale,
        s.output_scale,
        s.idle_gap_cap_s,
        s.concurrency,
        s.warmup_s,
        s.warmup_per_lane,
        s.duration_s.unwrap_or(0.0),
        s.compression
    )
}

/// Everything as JSON.
pub(crate) fn json(args: &DecodeWeightArgs, loads: &[LoadRun]) -> Value {
    json!({
        "study": "decode-weight",
        "trace": args.trace.display().to_string(),
        "deployment": {
            "shape": "1P1D in process: prefill sim (1 rank, 8k chunks, shortest-prefill-first) + decode sim (TP 8, DP attention) + infera-control + infera-proxy; an SMG arm: the same sims behind one `smg launch --pd-disaggregation --dp-aware` instead",
            "decode_ranks": args.decode_ranks,
            "prefill_cache_tokens": args.prefill_cache_tokens,
            "gpus_for_per_gpu_rates": args.gpus,
            "timing": "infera-sim defaults (the seeds' step-time calibration)",
            "seed": args.seed,
            "time_compression": args.speedup,
            "sample_interval_s": args.sample_interval_s,
        },
        "loads": loads.iter().map(|l| json!({
            "load": l.load.name(),
            "shaping": describe(&l.shaping),
            "match_seed_load": l.seed_load.as_ref().map(|m| json!({
                "sessions": m.sessions,
                "requests": m.requests,
                "mean_output_tokens": m.mean_output_tokens,
                "mean_think_s": m.mean_think_s,
                "output_scale": m.output_scale,
                "think_time_scale": m.think_time_scale,
            })),
            "arms": l.arms.iter().map(|a| arm_json(a, args.gpus)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn arm_json(a: &ArmRun, gpus: u32) -> Value {
    let mut v = json!({
        "arm": a.arm.to_string(),
        "key": a.arm.key(),
        "control_flags": a.arm.control_flags(),
        "tokens_per_s_per_gpu": a.report.total_tokens_per_s / f64::from(gpus),
        "wall_s": a.wall_s,
        "report": a.report.json(),
    });
    match &a.routing {
        Routing::Control { picks_at_start, picks, fallback_picks } => {
            v["control_decode_picks_at_start"] = json!(picks_at_start);
            v["control_decode_picks"] = json!(picks);
            v["proxy_fallback_picks"] = json!(fallback_picks);
        }
        Routing::Smg { counters, argv } => {
            v["smg_argv"] = json!(argv);
            v["smg"] = counters.json();
        }
    }
    v
}

/// Writes `study.json` and two SVGs per load point under `--out`; the JSON's path.
fn write_outputs(args: &DecodeWeightArgs, loads: &[LoadRun]) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    for l in loads {
        let rows: Vec<(Arm, &Report)> = l.arms.iter().map(|a| (a.arm, &a.report)).collect();
        let name = l.load.name();
        let svg = plot::interactivity_vs_throughput(
            &format!("Interactivity vs throughput, load {name}"),
            &rows,
            args.gpus,
        );
        std::fs::write(args.out.join(format!("{name}-interactivity.svg")), svg)?;
        let svg = plot::busiest_over_time(&format!("Decode ranks over time, load {name}"), &rows);
        std::fs::write(args.out.join(format!("{name}-busiest-rank.svg")), svg)?;
    }
    let path = args.out.join("study.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json(args, loads))? + "\n")?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use clap::Args as _;

    #[test]
    fn every_flag_follows_the_cli_conventions() {
        let study = super::DecodeWeightArgs::augment_args(clap::Command::new("decode-weight"));
        infera_proto::cli::check_conventions(study);
        let replay = crate::replay::ReplayArgs::augment_args(clap::Command::new("replay"));
        infera_proto::cli::check_conventions(replay);
    }
}

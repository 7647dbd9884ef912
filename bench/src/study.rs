//! `infera-bench study decode-weight`: the original study's decode request-weight study on the emulated
//! engine. For each scenario ([`scenario`]: steady state, scale-out, mixed DP sizes, KV
//! pressure, several routers, an unsaturated prefill), each load point, each of `--runs` paired
//! runs ([`pairing`]: run r of every arm shares a seed and a trace window, the arms in a random
//! order of the run's own; a screen may narrow the arms after run 1) and each arm (W = 0,
//! 180,000, 1,000,000 and the legacy round-robin and power-of-two by default), a **fresh**
//! in-process deployment ([`deploy`]) replays the run's trace window through its routers while
//! the scenario's events ([`events`]) change the decode pool and the decodes' per-rank load is
//! sampled from their `/v1/loads` at a fixed emulated interval. It prints the original study's two tables
//! per scenario and load point and each arm against the best peer with a paired-bootstrap
//! interval ([`table`], [`stats`]), writes every run to `study.json` and draws the plots
//! ([`plot`]) under `--out` ([`output`]). An `smg:POLICY` (or `sglang-router:POLICY`) arm puts
//! that gateway ([`smg`]) in front of the same sims instead of control and the proxies, and
//! reports its own counters.
//!
//! Load points: `published` replays the trace as it is (think time and output lengths ×1,
//! idle gaps capped at 300 s like AgentX); `seed` is `--match-seed-load` (the original study's ≈ 9 s
//! think time and ≈ 1,000 output tokens, see [`crate::replay::seed_load`]). Time is compressed:
//! the sims run `--speedup` times faster than the wall clock and the replay divides its waits
//! by the same factor, so every number is reported in emulated time; every router's load
//! polling is divided by it too (fair clocks: each polls at its default in emulated time).

mod arm;
mod classes;
pub(crate) mod deploy;
#[cfg(test)]
mod e2e;
mod events;
mod goodput_versus;
mod iso_throughput;
mod numbers;
mod output;
mod pairing;
mod plot;
mod prefill_cache;
mod scenario;
pub(crate) mod smg;
mod stats;
mod table;
mod weight;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use arm::Arm;
use deploy::Routing;
use events::Applied;
use infera_sim::params::TimingParams;
use pairing::{Pairing, screened};
use scenario::{Scenario, Topology, Window};
use table::Label;

use crate::replay::report::Report;
use crate::replay::schedule::Shaping;
use crate::replay::seed_load::{self, SeedLoad};
use crate::replay::trace::{Format, Source};
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
    /// `--match-seed-load`: the original study's operating point.
    Seed,
}

impl LoadPoint {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LoadPoint::Published => "published",
            LoadPoint::Seed => "seed",
        }
    }
}

/// `study decode-weight` flags.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DecodeWeightArgs {
    /// The agentic trace (session JSONL, optionally `.gz`); the default is the bench's built-in
    /// synthetic one (the real ones: `cargo xtask traces`, then
    /// `--trace traces/agentx/weka_v8.jsonl.gz`).
    #[arg(long, env = "INFERA_BENCH_TRACE", default_value = "builtin:agentic")]
    trace: Source,
    /// Scenarios, each with every load point and arm.
    #[arg(long, env = "INFERA_BENCH_SCENARIOS", value_enum, value_delimiter = ',', default_value = "steady")]
    scenarios: Vec<Scenario>,
    /// Paired runs: run r of every arm replays the same trace window (sessions from
    /// (r − 1) × `--window-stride`) with the same seed (`--seed` + r − 1), the arms in a random
    /// order of the run's own. Fresh runs of one arm differ by up to 10 points of p90 here.
    #[arg(long, env = "INFERA_BENCH_RUNS", default_value_t = 1)]
    runs: usize,
    /// Sessions between two runs' trace windows (the replay starts that far into the trace and
    /// wraps around at its end).
    #[arg(long, env = "INFERA_BENCH_WINDOW_STRIDE", default_value_t = 50)]
    window_stride: usize,
    /// Run 1 is a screen of every arm; runs 2… go on with the recommended arm and the
    /// `--screen-keep` peer arms with the highest p90 interactivity in it among those that serve
    /// within 10 % of the best-serving peer's tok/s.
    #[arg(long, env = "INFERA_BENCH_SCREEN")]
    screen: bool,
    /// Peer arms (SMG, infera's legacy policies) the screen keeps.
    #[arg(long, env = "INFERA_BENCH_SCREEN_KEEP", default_value_t = 2)]
    screen_keep: usize,
    /// The arm the verdict is about (its ratio to the best peer arm, with a paired-bootstrap
    /// 95 % interval); the manual's recommended setting.
    #[arg(long, env = "INFERA_BENCH_RECOMMENDED", default_value = "1e6/age")]
    recommended: Arm,
    /// The prefills' queue order (`--schedule-policy`): the kit's `shortest-prefill-first`, or
    /// `hrrn` (SGLang's aging order), `fcfs`.
    #[arg(long, env = "INFERA_BENCH_PREFILL_SCHEDULE_POLICY", default_value = "shortest-prefill-first")]
    prefill_schedule_policy: String,
    /// Load points, each with every arm.
    #[arg(
        long,
        env = "INFERA_BENCH_LOADS",
        value_enum,
        value_delimiter = ',',
        default_value = "published,seed"
    )]
    loads: Vec<LoadPoint>,
    /// Arms: request weights (demand on), `W/pP`, `auto`, `auto/admission[/no-guard]` and
    /// `W/age/admission[/no-guard]` (fleet admission with that prefill guard), legacy policies (demand off), SMG
    /// (`smg:round_robin|power_of_two|least_load|cache_aware`, `:no-overload` to add
    /// `--disable-worker-overload-protection`) and sglang-router 0.3.2
    /// (`sglang-router:round_robin|power_of_two|cache_aware`, not DP-aware).
    #[arg(
        long,
        env = "INFERA_BENCH_ARMS",
        value_delimiter = ',',
        default_value = "0,180000,1000000,round-robin,power-of-two"
    )]
    arms: Vec<Arm>,
    /// Concurrent sessions (the original study: 88), × the scenario's session scale. Several
    /// (`66,88,110`) sweep the offered load: each is a cell of its own, all with the same
    /// think-time and output scales (`--seed-sessions`); the study then compares the arms at
    /// equal throughput and draws each arm's throughput–interactivity curve, and with
    /// `--batch-share` a goodput curve.
    #[arg(long, env = "INFERA_BENCH_CONCURRENCY", value_delimiter = ',', default_value = "88")]
    concurrency: Vec<usize>,
    /// The seed point's output and think-time scales are matched on the trace's first this many
    /// sessions (the original study's 88), whatever `--concurrency` offers: a sweep changes
    /// only the load.
    #[arg(long, env = "INFERA_BENCH_SEED_SESSIONS", default_value_t = 88)]
    seed_sessions: usize,
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
    /// Time compression: the sims' `--sim-speedup`; the replay's waits are divided by it. Every
    /// router's load polling is divided by it too, down to its floor: at the default 10×, SMG's
    /// shortest load-monitor interval (1 s) is its default 10 s in emulated time, and control's
    /// 100 ms engine poll stays 100 ms emulated (10 ms of wall clock).
    #[arg(long, env = "INFERA_BENCH_SPEEDUP", default_value_t = 10.0)]
    speedup: f64,
    /// Emulated seconds between readings of the decode's `/v1/loads`.
    #[arg(long, env = "INFERA_BENCH_SAMPLE_INTERVAL_S", default_value_t = 1.0)]
    sample_interval_s: f64,
    /// Seed of control's tie-breaks and the sims.
    #[arg(long, env = "INFERA_BENCH_SEED", default_value_t = 1)]
    seed: u64,
    /// Attention-DP ranks of a full decode sim (the mixed-DP scenario's second has half).
    #[arg(long, env = "INFERA_BENCH_DECODE_RANKS", default_value_t = 8)]
    decode_ranks: u32,
    /// KV tokens per decode rank in the kv-pressure scenario (SGLang's `--max-total-tokens`).
    /// Default: 1.5 × the 1.6 M a rank holds at the seed point in steady state (median).
    #[arg(long, env = "INFERA_BENCH_KV_PRESSURE_TOKENS", default_value_t = 2_400_000)]
    kv_pressure_tokens: u64,
    /// The prefill's prefix cache, tokens (the kit's HiCache: 4 × 250 GB / 70,272 B per token).
    #[arg(long, env = "INFERA_BENCH_PREFILL_CACHE_TOKENS", default_value_t = 14_230_000)]
    prefill_cache_tokens: u64,
    /// GPUs per prefill; tok/s/GPU divides by these plus one per decode rank (the original study's
    /// 1P1D: 4 + 8 = 12).
    #[arg(long, env = "INFERA_BENCH_PREFILL_GPUS", default_value_t = 4)]
    prefill_gpus: u32,
    /// The `smg` SMG arms run (default: `.venv/bin/smg` of the workspace, `cargo xtask setup`).
    #[arg(long, env = "INFERA_SMG")]
    smg: Option<PathBuf>,
    /// The `sglang-router` the `sglang-router:` arms run (default:
    /// `.venv-sglang-router/bin/sglang-router` of the workspace, `cargo xtask setup`).
    #[arg(long, env = "INFERA_SGLANG_ROUTER")]
    sglang_router: Option<PathBuf>,
    /// Where `study.json`, the plots and the SMG arms' logs go.
    #[arg(long, env = "INFERA_BENCH_OUT", default_value = "target/study")]
    out: PathBuf,
    /// Each request carries its session's name in `x-session-id`, as agentic clients name their
    /// conversation (OpenAI's `prompt_cache_key`, Anthropic's `metadata.user_id`): infera's
    /// prefill session affinity reads it; SGLang and SMG ignore the header.
    #[arg(long, env = "INFERA_BENCH_SESSION_HEADER")]
    session_header: bool,
    /// This share of the sessions (0–1, the same in every arm) is `batch`, the rest
    /// `interactive`: each request names its class in `x-infera-service-class`, and each arm's
    /// goodput per class is reported (requests that met their class's TTFT and ITL targets,
    /// `crate::replay::goodput`). Routers without classes ignore the header.
    #[arg(long, env = "INFERA_BENCH_BATCH_SHARE")]
    batch_share: Option<f64>,
    /// No progress line on stderr.
    #[arg(long, env = "INFERA_BENCH_QUIET")]
    quiet: bool,
}

/// One run of an arm.
pub(crate) struct ArmRun {
    pub(crate) arm: Arm,
    /// 1-based; run r of every arm shares its seed and trace window.
    pub(crate) run: usize,
    pub(crate) seed: u64,
    pub(crate) session_offset: usize,
    pub(crate) report: Report,
    /// The scenario's events as they happened.
    pub(crate) applied: Vec<Applied>,
    /// The W control's decode picks used over the run (empty for SMG).
    pub(crate) weights: weight::WeightSeries,
    /// What the router says it did (control's picks, or SMG's counters).
    pub(crate) routing: Routing,
    /// What the prefills' prefix caches saved (the router's prefill picks, with two prefills).
    pub(crate) prefill_cache: prefill_cache::PrefillCache,
    pub(crate) wall_s: f64,
}

impl ArmRun {
    /// The row name: the arm, and the run when there are several.
    pub(crate) fn label(&self, runs: usize) -> Label {
        Label { arm: self.arm, run: (runs > 1).then_some(self.run) }
    }
}

/// One scenario at one load point: every arm's runs.
pub(crate) struct LoadRun {
    pub(crate) scenario: Scenario,
    pub(crate) topology: Topology,
    pub(crate) load: LoadPoint,
    pub(crate) shaping: Shaping,
    pub(crate) seed_load: Option<SeedLoad>,
    pub(crate) arms: Vec<ArmRun>,
}

pub(crate) fn run(args: StudyArgs) -> anyhow::Result<()> {
    let Which::DecodeWeight(args) = args.study;
    args.trace.announce();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let started = Instant::now();
    let loads = rt.block_on(decode_weight(&args))?;
    print!("{}", output::sweep_tables(&args, &loads));
    let path = output::write(&args, &loads)?;
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
            self.concurrency.iter().all(|&c| c > 0)
                && !self.concurrency.is_empty()
                && self.runs > 0
                && self.seed_sessions > 0
                && !self.arms.is_empty()
                && !self.loads.is_empty()
                && !self.scenarios.is_empty(),
            "nothing to run"
        );
        anyhow::ensure!(self.decode_ranks > 0, "--decode-ranks must be at least 1");
        anyhow::ensure!(self.kv_pressure_tokens > 0, "--kv-pressure-tokens must be at least 1");
        anyhow::ensure!(
            !self.screen || self.arms.contains(&self.recommended),
            "--screen keeps the recommended arm ({}): name it in --arms",
            self.recommended
        );
        deploy::prefill_policy(&self.prefill_schedule_policy)?;
        Ok(())
    }

    fn window(&self) -> Window {
        Window { warmup_s: self.warmup_s, end_s: self.duration_s }
    }

    /// Whether `--concurrency` sweeps the offered load (cells, logs and plots name their sessions).
    fn sweeps(&self) -> bool {
        self.concurrency.len() > 1
    }

    /// The load point's shaping for `topology` at `sessions` concurrent sessions (the scenario's
    /// session scale multiplies them; the seed point's output and think-time scales come from the
    /// trace's first `--seed-sessions`).
    fn shaping(
        &self,
        load: LoadPoint,
        topology: &Topology,
        sessions: usize,
    ) -> anyhow::Result<(Shaping, Option<SeedLoad>)> {
        let concurrency = ((sessions as f64 * topology.sessions_scale).round() as usize).max(1);
        let mut shaping = Shaping {
            speedup: 1.0,
            think_time_scale: 1.0,
            output_scale: 1.0,
            idle_gap_cap_s: self.idle_gap_cap_s,
            concurrency,
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
        let m = seed_load::from_trace(&self.trace, Format::Agentic, self.seed_sessions, self.idle_gap_cap_s)?;
        (shaping.think_time_scale, shaping.output_scale) = (m.think_time_scale, m.output_scale);
        Ok((shaping, Some(m)))
    }
}

/// Runs every scenario, load point, run and arm, printing each cell's tables as it completes.
pub(crate) async fn decode_weight(args: &DecodeWeightArgs) -> anyhow::Result<Vec<LoadRun>> {
    args.validate()?;
    let mut cells = Vec::new();
    for &scenario in &args.scenarios {
        let topology = scenario.topology(args.decode_ranks, args.kv_pressure_tokens, args.window());
        for (&load, &sessions) in args.loads.iter().flat_map(|l| args.concurrency.iter().map(move |c| (l, c)))
        {
            let (shaping, seed_load) = args.shaping(load, &topology, sessions)?;
            println!("== scenario {}, load point {}: {topology}", scenario.name(), load.name());
            println!("   {}", describe(&shaping));
            if let Some(m) = &seed_load {
                println!("   {m}");
            }
            let cell = Cell { scenario, topology: &topology, load, shaping: &shaping };
            let mut arms = Vec::new();
            let mut active = args.arms.clone();
            for run in 1..=args.runs {
                let pairing = Pairing::of(args, run);
                let order = pairing.order(&active);
                let names: Vec<String> = order.iter().map(ToString::to_string).collect();
                eprintln!(
                    "   run {run}: seed {}, sessions from {}, order: {}",
                    pairing.seed,
                    pairing.session_offset,
                    names.join(" · ")
                );
                for arm in order {
                    // An arm that cannot run here (its gateway does not start on this topology)
                    // is reported and left out; the night goes on with the others.
                    let done = match run_arm(args, arm, &pairing, &cell).await {
                        Ok(done) => done,
                        Err(e) => {
                            eprintln!("   {arm} run {run} DID NOT RUN: {e:#}");
                            println!(
                                "   {arm} run {run} did not run: {}",
                                format!("{e:#}").lines().next().unwrap_or("")
                            );
                            continue;
                        }
                    };
                    eprintln!(
                        "   {arm} run {run}: p90 interactivity {}, {:.0} tok/s/GPU, prefill cache hits {}; {} measured, {} warm-up, {} failed, {} cut at the end; {:.0} s wall",
                        done.report.interactivity.p90.map_or_else(|| "–".to_owned(), |p| format!("{p:.1}")),
                        done.report.total_tokens_per_s / f64::from(topology.gpus(args.prefill_gpus)),
                        done.prefill_cache
                            .hit_ratio()
                            .map_or_else(|| "–".to_owned(), |r| format!("{:.1} %", 100.0 * r)),
                        done.report.completed,
                        done.report.warmup,
                        done.report.failed,
                        done.report.cut,
                        done.wall_s
                    );
                    arms.push(done);
                }
                if run == 1 && args.screen {
                    active = screened(args, &arms);
                    let kept: Vec<String> = active.iter().map(ToString::to_string).collect();
                    eprintln!("   the screen keeps: {}", kept.join(" · "));
                }
            }
            let position = |a: &Arm| args.arms.iter().position(|x| x == a).unwrap_or(usize::MAX);
            arms.sort_by_key(|a| (position(&a.arm), a.run));
            let cell = LoadRun { scenario, topology: topology.clone(), load, shaping, seed_load, arms };
            output::print(args, &cell);
            cells.push(cell);
        }
    }
    Ok(cells)
}

/// A scenario's and load point's name in file names: `scenario-load`.
pub(crate) fn cell_base(scenario: Scenario, load: LoadPoint) -> String {
    format!("{}-{}", scenario.name(), load.name())
}

/// A cell's name in file names: [`cell_base`], and `-cN` (its concurrent sessions) when
/// `--concurrency` sweeps.
pub(crate) fn cell_name(
    args: &DecodeWeightArgs,
    scenario: Scenario,
    load: LoadPoint,
    shaping: &Shaping,
) -> String {
    let name = cell_base(scenario, load);
    if args.sweeps() { format!("{name}-c{}", shaping.concurrency) } else { name }
}

/// Emulated seconds between readings of control's W.
const WEIGHT_INTERVAL_S: f64 = 10.0;

/// Where one arm runs.
struct Cell<'a> {
    scenario: Scenario,
    topology: &'a Topology,
    load: LoadPoint,
    shaping: &'a Shaping,
}

async fn run_arm(
    args: &DecodeWeightArgs,
    arm: Arm,
    pairing: &Pairing,
    cell: &Cell<'_>,
) -> anyhow::Result<ArmRun> {
    let started = Instant::now();
    let run = pairing.run;
    if matches!(arm, Arm::Smg(_)) {
        std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    }
    let spec = deploy::Spec {
        arm,
        topology: cell.topology.clone(),
        speedup: args.speedup,
        seed: pairing.seed,
        prefill_cache_tokens: args.prefill_cache_tokens,
        prefill_policy: deploy::prefill_policy(&args.prefill_schedule_policy)?,
        smg: args.smg.clone(),
        sglang_router: args.sglang_router.clone(),
        smg_log: args.out.join(format!(
            "smg-{}-{}-{run}",
            cell_name(args, cell.scenario, cell.load, cell.shaping),
            arm.key()
        )),
    };
    let deployment = deploy::Deployment::start(&spec).await?;
    let picks_at_start = deployment.decode_picks().await?;
    let plan = Plan {
        trace: args.trace.clone(),
        format: Format::Agentic,
        urls: deployment.urls.clone(),
        model: deploy::MODEL.to_owned(),
        mode: Some(Mode::Closed),
        session_offset: pairing.session_offset,
        session_header: args.session_header,
        batch_share: args.batch_share,
        shaping: cell.shaping.clone(),
        quiet: args.quiet,
        loads: Some(Loads {
            pool: deployment.pool.subscribe(),
            interval_s: args.sample_interval_s,
            model: Some(TimingParams::default()),
        }),
    };
    let (replayed, stop_weights) = tokio::sync::oneshot::channel::<()>();
    let replay = async {
        let report = crate::replay::replay(&plan).await;
        let _ = replayed.send(());
        report
    };
    let stopped = async {
        let _ = stop_weights.await;
    };
    let (report, applied, weights) = tokio::join!(
        replay,
        events::drive(&deployment, &cell.topology.events, args.speedup),
        weight::sample(&deployment, WEIGHT_INTERVAL_S, args.speedup, stopped)
    );
    let routing = deployment.routing(picks_at_start).await;
    let prefill_cache = prefill_cache::PrefillCache::read(&deployment.prefill_urls()).await;
    deployment.stop().await?;
    Ok(ArmRun {
        arm,
        run,
        seed: pairing.seed,
        session_offset: pairing.session_offset,
        report: report?,
        applied: applied?,
        weights,
        routing: routing?,
        prefill_cache: prefill_cache.context("reading the prefills' request logs")?,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

pub(crate) fn describe(s: &Shaping) -> String {
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

#[cfg(test)]
mod tests {
    use clap::Args as _;
    use clap::Parser as _;

    /// `bench/study-fair.sh --list`: every step's command parses and validates as the study's
    /// own command line, and each night's steps fit one night (8 h).
    #[test]
    fn the_night_plan_runs_valid_commands_a_night_at_a_time() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/study-fair.sh");
        let out = std::process::Command::new("bash").args([script, "--list"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let listing = String::from_utf8(out.stdout).unwrap();
        let mut nights = std::collections::BTreeMap::<u32, u32>::new();
        for line in listing.lines().filter(|l| !l.starts_with("==")) {
            let (head, command) = line.split_once("  target/release/infera-bench ").expect(line);
            let (night, minutes) = head.split_once(" night ").expect(line).1.split_once('~').expect(line);
            let minutes = minutes.trim().strip_suffix(" min").expect(line).trim().parse::<u32>().unwrap();
            *nights.entry(night.trim().parse().unwrap()).or_default() += minutes;
            let argv = std::iter::once("infera-bench").chain(command.split_whitespace());
            let args = crate::Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{line}: {e}"));
            let crate::Cmd::Study(super::StudyArgs { study: super::Which::DecodeWeight(args) }) =
                args.command
            else {
                panic!("{line}: not the study");
            };
            args.validate().unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        assert_eq!(listing.lines().filter(|l| !l.starts_with("==")).count(), 14, "{listing}");
        assert_eq!(nights.keys().copied().collect::<Vec<_>>(), [1, 2], "{listing}");
        for (night, minutes) in &nights {
            assert!(listing.contains(&format!("budget of night {night}: {minutes} min")), "{listing}");
            assert!(*minutes <= 8 * 60, "night {night}: {minutes} min is more than a night");
        }
        let total: u32 = nights.values().sum();
        assert!(listing.contains(&format!("budget of these steps: {total} min")), "{listing}");
        // One night's steps alone.
        let out =
            std::process::Command::new("bash").args([script, "--list", "--night", "2"]).output().unwrap();
        let second = String::from_utf8(out.stdout).unwrap();
        assert!(second.lines().filter(|l| !l.starts_with("==")).all(|l| l.contains(" night 2 ")), "{second}");
        assert!(second.contains(&format!("budget of these steps: {} min", nights[&2])), "{second}");
    }

    #[test]
    fn every_flag_follows_the_cli_conventions() {
        let study = super::DecodeWeightArgs::augment_args(clap::Command::new("decode-weight"));
        infera_runtime::cli::check_conventions(study);
        let replay = crate::replay::ReplayArgs::augment_args(clap::Command::new("replay"));
        infera_runtime::cli::check_conventions(replay);
    }
}

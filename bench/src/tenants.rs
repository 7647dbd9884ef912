//! `infera-bench tenants`: fleet admission and tenant shares under a flood, through several
//! proxies (`manual/features/service_classes.md`).
//!
//! Two tenants call the same PD deployment (one prefill, one decode of `--decode-ranks` DP
//! ranks, emulated) through `--proxies` proxies with their own API keys: `steady` and `flood`,
//! whose callers outnumber steady's and whose prompts are longer. Both are backlogged, so each
//! is owed its weight's share of the input tokens served. One class holds every request to an
//! ITL target (`--itl-ms`) near the decode's knee. Per arm, on a fresh deployment:
//!
//! - `fleet`: control's one admission (`--admission on`): a pick books only where the decode's
//!   predicted step stays within the target; the rest wait in control's queue, served by tenant
//!   share.
//! - `per-proxy`: no fleet admission; each proxy admits on its own (`--max-inflight`, the
//!   fleet's capacity divided among the proxies, FIFO): what a gateway replica can do alone.
//! - `none`: no admission anywhere.
//! - `smg`: the peer. SMG replicas in place of the proxies, one per proxy, each with SMG's
//!   tenant rate limits (each tenant's share of the deployment's tokens per minute, split among
//!   the replicas) and its concurrency cap (`--per-proxy-inflight`): what an SMG operator turns
//!   on against a noisy tenant. SMG 1.13 applies those limits on its gRPC path only, so in
//!   front of these HTTP PD workers only the cap acts ([`smg`]).
//!
//! Measured over a window once control's step fit predicts the decode's step (after the callers
//! have all joined): each tenant's share of the input
//! tokens served (`usage.prompt_tokens` of the requests answered in the window) against its
//! weight's, Jain's index over them, the step control predicts from the ledger and the step the
//! engine measured, each against the target, and the prediction's error.

mod fairness;
mod load;
mod report;
mod sample;
mod smg;

use std::time::{Duration, Instant};

use infera_testkit::{ApiKeys, ClusterSpec, ControlSpec, SimSpec, Workers};

use self::fairness::Allocation;
use self::load::{Load, TenantLoad};

/// The served model.
const MODEL: &str = "m";

#[derive(clap::Args, Debug)]
pub(crate) struct TenantsArgs {
    /// The arms, in the order run: `fleet`, `per-proxy`, `none`, `smg`.
    #[arg(
        long,
        env = "INFERA_BENCH_TENANTS_ARMS",
        value_delimiter = ',',
        default_value = "fleet,per-proxy,none,smg"
    )]
    arms: Vec<Arm>,
    /// Runs of every arm (the order of the arms turns by one each run).
    #[arg(long, env = "INFERA_BENCH_TENANTS_RUNS", default_value_t = 1)]
    runs: u32,
    /// The proxies the callers spread over.
    #[arg(long, env = "INFERA_BENCH_TENANTS_PROXIES", default_value_t = 4)]
    proxies: usize,
    /// DP ranks of the one decode worker.
    #[arg(long, env = "INFERA_BENCH_TENANTS_DECODE_RANKS", default_value_t = 4)]
    decode_ranks: u32,
    /// The class's ITL target, ms of engine time per token. The sim's step is 31.2 + 1.55·x ms
    /// up to x = 8 requests on the busiest rank, 5.9 ms a request above, and each step yields
    /// 3.5 tokens a request (its default calibration's speculative decoding, which control's fit
    /// reads from `decode_moments`): 13 ms is a step of about 46 ms, about 9 requests.
    #[arg(long, env = "INFERA_BENCH_TENANTS_ITL_MS", default_value_t = 13)]
    itl_ms: u32,
    /// The class's TTFT target, ms: a request still waiting then is shed.
    #[arg(long, env = "INFERA_BENCH_TENANTS_TTFT_MS", default_value_t = 30_000)]
    ttft_ms: u32,
    /// Steady's callers.
    #[arg(long, env = "INFERA_BENCH_TENANTS_STEADY_CALLERS", default_value_t = 32)]
    steady_callers: usize,
    /// The flooding tenant's callers.
    #[arg(long, env = "INFERA_BENCH_TENANTS_FLOOD_CALLERS", default_value_t = 128)]
    flood_callers: usize,
    /// Steady's weight.
    #[arg(long, env = "INFERA_BENCH_TENANTS_STEADY_WEIGHT", default_value_t = 1.0)]
    steady_weight: f64,
    /// The flooding tenant's weight.
    #[arg(long, env = "INFERA_BENCH_TENANTS_FLOOD_WEIGHT", default_value_t = 1.0)]
    flood_weight: f64,
    /// Words in a steady prompt.
    #[arg(long, env = "INFERA_BENCH_TENANTS_STEADY_WORDS", default_value_t = 200)]
    steady_words: usize,
    /// Words in a flood prompt.
    #[arg(long, env = "INFERA_BENCH_TENANTS_FLOOD_WORDS", default_value_t = 400)]
    flood_words: usize,
    /// Tokens asked per answer.
    #[arg(long, env = "INFERA_BENCH_TENANTS_MAX_TOKENS", default_value_t = 128)]
    max_tokens: u32,
    /// Each proxy's `--max-inflight` in the `per-proxy` arm, and each SMG replica's
    /// `--max-concurrent-requests` in the `smg` arm.
    #[arg(long, env = "INFERA_BENCH_TENANTS_PER_PROXY_INFLIGHT", default_value_t = 8)]
    per_proxy_inflight: usize,
    /// The sims' `--sim-speedup`.
    #[arg(long, env = "INFERA_BENCH_TENANTS_SIM_SPEEDUP", default_value_t = 10.0)]
    sim_speedup: f64,
    /// The callers join one by one over this many seconds (the decode's load rises through
    /// every level, which control's step fit needs before it predicts).
    #[arg(long, env = "INFERA_BENCH_TENANTS_RAMP_S", default_value_t = 60)]
    ramp_s: u64,
    /// How long to wait for control's step fit to predict before the window anyway.
    #[arg(long, env = "INFERA_BENCH_TENANTS_PREDICT_TIMEOUT_S", default_value_t = 180)]
    predict_timeout_s: u64,
    /// Load between the fit's trust and the window.
    #[arg(long, env = "INFERA_BENCH_TENANTS_SETTLE_S", default_value_t = 10)]
    settle_s: u64,
    /// The measured window.
    #[arg(long, env = "INFERA_BENCH_TENANTS_WINDOW_S", default_value_t = 60)]
    window_s: u64,
    /// The first run's seed (prompts and sims); run `r` uses `seed + r`.
    #[arg(long, env = "INFERA_BENCH_TENANTS_SEED", default_value_t = 1)]
    seed: u64,
    /// The `smg` arm's program (else the workspace's `.venv/bin/smg`).
    #[arg(long, env = "INFERA_SMG")]
    smg: Option<std::path::PathBuf>,
    /// What the deployment serves at the ITL target, in SMG's tokens (input and output) per
    /// wall-clock minute: the `smg` arm's tenant limits split it by weight, then among the
    /// replicas. The default is what fleet admission served at the default point (4.78 M input
    /// and 1.41 M output tokens a minute, `bench/results/2026-12-05-tenants.md`).
    #[arg(long, env = "INFERA_BENCH_TENANTS_SMG_TOKENS_PER_MINUTE", default_value_t = 6_190_000)]
    smg_tokens_per_minute: u64,
}

/// Who admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Arm {
    /// Control's one admission for the fleet.
    Fleet,
    /// Each proxy on its own.
    PerProxy,
    /// Nobody.
    None,
    /// SMG replicas, each with its tenant rate limits and concurrency cap ([`smg`]).
    Smg,
}

impl Arm {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Arm::Fleet => "fleet admission (control)",
            Arm::PerProxy => "per-proxy cap",
            Arm::None => "no admission",
            Arm::Smg => "SMG: tenant rate limits and a cap per replica",
        }
    }
}

/// What one arm's run gave.
#[derive(Debug)]
pub(crate) struct ArmRun {
    pub(crate) arm: Arm,
    pub(crate) run: u32,
    /// Seconds from the load's start to the fit's first prediction (`None`: not within the
    /// timeout; admission then admitted everything).
    pub(crate) predicted_after_s: Option<f64>,
    /// The window's length, s.
    pub(crate) window_s: f64,
    /// Per tenant (steady, flood): what was answered in the window.
    pub(crate) tenants: Vec<report::TenantWindow>,
    /// Control's admitted tokens per tenant over the window (`infera_router_admitted_tokens_total`).
    pub(crate) admitted: Vec<f64>,
    pub(crate) steps: Vec<sample::StepSample>,
    /// Tokens a request gained per decode step over the run (the engine's `decode_moments`):
    /// the steps are held to the ITL target times this.
    pub(crate) tokens_per_step: f64,
}

pub(crate) fn run(args: TenantsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.proxies >= 1 && args.decode_ranks >= 1,
        "--proxies and --decode-ranks must be at least 1"
    );
    anyhow::ensure!(args.steady_weight > 0.0 && args.flood_weight > 0.0, "weights must be positive");
    crate::binaries::release_binaries("tenants", &["infera-control", "infera-proxy"])?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let mut runs = Vec::new();
        for r in 0..args.runs {
            let n = args.arms.len();
            for i in 0..n {
                let arm = args.arms[(i + r as usize) % n];
                let done = arm_run(&args, arm, r).await?;
                report::print_run(&args, &done);
                runs.push(done);
            }
        }
        report::print_summary(&args, &runs);
        Ok(())
    })
}

async fn arm_run(args: &TenantsArgs, arm: Arm, run: u32) -> anyhow::Result<ArmRun> {
    let seed = args.seed + u64::from(run);
    let keys = ApiKeys::new(&["steady", "flood"]);
    let classes = tempfile::NamedTempFile::new()?;
    std::fs::write(
        classes.path(),
        format!(
            "default_class = \"tenant\"\n\n[[classes]]\nname = \"tenant\"\nttft_ms = {}\nitl_ms = {}\npriority = 1\n\n\
             [tenants]\ndefault_weight = 1\nweights = {{ steady = {}, flood = {} }}\n",
            args.ttft_ms, args.itl_ms, args.steady_weight, args.flood_weight
        ),
    )?;
    let sims = [SimSpec::prefill("prefill-0", MODEL), SimSpec::decode("decode-0", MODEL, args.decode_ranks)]
        .into_iter()
        .map(|s| s.seed(seed).speedup(args.sim_speedup).sim_flag("--sim-log", "error"))
        .collect();
    let mut spec = ClusterSpec::new(MODEL, sims);
    let classes_path = classes.path().display().to_string();
    let mut control =
        vec!["--decode-input-demand", "on", "--decode-request-weight", "auto", "--service-classes"];
    control.push(&classes_path);
    if arm == Arm::Fleet {
        control.extend(["--admission", "on"]);
    }
    spec.control = ControlSpec::new(Workers::None).flags(control);
    spec.proxies = args.proxies;
    spec.proxy_flags = vec!["--api-keys".to_owned(), keys.path().display().to_string()];
    if arm == Arm::PerProxy {
        spec.proxy_flags.extend(["--max-inflight".to_owned(), args.per_proxy_inflight.to_string()]);
        spec.proxy_flags.extend(["--queue-timeout-ms".to_owned(), args.ttft_ms.to_string()]);
    }
    spec.proxy_api_key = Some(keys.key("steady").to_owned());
    (spec.processes, spec.sims_in_process) = (true, true);
    let cluster = spec.start().await?;

    let tenants = [
        TenantLoad {
            tenant: "steady".into(),
            key: keys.key("steady").into(),
            callers: args.steady_callers,
            prompt_words: args.steady_words,
            max_tokens: args.max_tokens,
        },
        TenantLoad {
            tenant: "flood".into(),
            key: keys.key("flood").into(),
            callers: args.flood_callers,
            prompt_words: args.flood_words,
            max_tokens: args.max_tokens,
        },
    ];
    // The SMG arm's callers go to its replicas; control and the proxies stay up beside them,
    // routing nothing, for control's reading of the engine's measured step.
    let replicas = match arm {
        Arm::Smg => Some(smg::start(args, &cluster, &keys).await?),
        _ => None,
    };
    let urls = replicas.as_ref().map_or_else(|| cluster.proxy_urls(), smg::Replicas::urls);
    let started = Instant::now();
    let ramp = Duration::from_secs(args.ramp_s);
    let load = Load::start(MODEL, &urls, &tenants, seed, ramp);
    let predicted_after_s = match arm {
        Arm::Smg => None,
        _ => until_predicted(&cluster.control, Duration::from_secs(args.predict_timeout_s), started).await?,
    };
    // The window starts once every caller has joined and the load has settled.
    let joined = started + ramp;
    tokio::time::sleep(joined.saturating_duration_since(Instant::now()) + Duration::from_secs(args.settle_s))
        .await;

    let before = admitted(&cluster.control.metrics().await?);
    let from = Instant::now();
    let window = Duration::from_secs(args.window_s);
    let steps = sample::steps(&cluster.control, MODEL, window, arm != Arm::Smg).await?;
    let to = Instant::now();
    let after = admitted(&cluster.control.metrics().await?);
    let tokens_per_step = sample::engine_tokens_per_step(&cluster.sim("decode-0").url).await?;
    let answers = load.stop().await?;
    if let Some(replicas) = replicas {
        replicas.stop().await?;
    }
    let tenants = tenants.iter().map(|t| report::TenantWindow::of(&t.tenant, &answers, from, to)).collect();
    let drained = cluster.ledger_returns_to_zero().await;
    cluster.stop().await?;
    drained.map_err(|e| e.context(format!("after the {arm:?} arm")))?;
    Ok(ArmRun {
        arm,
        run,
        predicted_after_s,
        window_s: (to - from).as_secs_f64(),
        tenants,
        admitted: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
        steps,
        tokens_per_step,
    })
}

/// Seconds from `started` until control's fit predicts the decode's step (what admission weighs),
/// polled; `None` past `timeout`.
async fn until_predicted(
    control: &infera_testkit::Control,
    timeout: Duration,
    started: Instant,
) -> anyhow::Result<Option<f64>> {
    let deadline = started + timeout;
    while Instant::now() < deadline {
        if sample::step(&control.metrics().await?, MODEL).is_some() {
            return Ok(Some(started.elapsed().as_secs_f64()));
        }
        tokio::time::sleep(sample::EVERY).await;
    }
    Ok(None)
}

/// Control's admitted tokens so far, steady's then flood's.
fn admitted(metrics: &str) -> [f64; 2] {
    let of = |tenant: &str| {
        infera_testkit::http::metric_sum(
            metrics,
            "infera_router_admitted_tokens_total",
            &format!("model=\"{MODEL}\",tenant=\"{tenant}\""),
        )
    };
    [of("steady"), of("flood")]
}

/// Steady's and the flood's weights, as [`fairness`] takes them with `tokens`.
fn allocations(args: &TenantsArgs, tokens: [f64; 2]) -> [Allocation; 2] {
    [
        Allocation { tokens: tokens[0], weight: args.steady_weight },
        Allocation { tokens: tokens[1], weight: args.flood_weight },
    ]
}

#[cfg(test)]
mod tests;

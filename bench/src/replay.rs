//! `infera-bench replay`: replays a request trace against an OpenAI-compatible base URL (a
//! proxy, or a worker directly) and reports throughput, TTFT, ITL and interactivity.
//!
//! - [`trace`]: Mooncake and agentic-session readers, line by line, plain or gzip.
//! - [`prompt`]: prompt text in which shared hash blocks are shared prefixes.
//! - [`schedule`]: open loop by timestamp, or closed-loop lanes with think time.
//! - [`drive`]: one streamed chat completion, timed.
//! - [`ranks`]: the decode worker's DP ranks over time, from its `/v1/loads`.
//! - [`percentile`]: the percentiles both summaries use.
//! - [`seed_load`]: `--match-seed-load`, the original study's operating point.
//! - [`report`]: the summary, as text and as JSON (`--json FILE`).
//!
//! Mooncake replays open loop by default, agentic traces closed loop; `--mode` overrides
//! (closed loop over Mooncake treats each request as a one-turn session). Without `--trace` it
//! replays a built-in synthetic trace ([`trace::synthetic`]) of the kind the flags ask for.

mod drive;
pub(crate) mod goodput;
pub(crate) mod percentile;
mod prompt;
pub(crate) mod ranks;
pub(crate) mod report;
pub(crate) mod schedule;
pub(crate) mod seed_load;
pub(crate) mod trace;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use drive::{DriveError, Target};
use infera_sim::params::TimingParams;
use ranks::Sampler;
use report::{Report, Sample};
use schedule::{Job, Ran, Shaping};
use trace::{Builtin, Format, Source};

/// How requests are paced.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// At the trace's timestamps ÷ `--speedup`, without waiting for responses.
    Open,
    /// `--concurrency` lanes, each sending a session's turns one after another.
    Closed,
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ReplayArgs {
    /// The trace: Mooncake JSONL or agentic session JSONL, optionally `.gz`, or a built-in
    /// synthetic one, `builtin:mooncake` or `builtin:agentic` (real traces: `cargo xtask
    /// traces`, into `traces/`). Default: the built-in agentic trace with `--format agentic`,
    /// `--mode closed` or `--match-seed-load`, else the built-in Mooncake one.
    #[arg(long, env = "INFERA_BENCH_TRACE")]
    trace: Option<Source>,
    /// The trace format.
    #[arg(long, env = "INFERA_BENCH_FORMAT", value_enum, default_value_t = Format::Auto)]
    format: Format,
    /// The OpenAI-compatible base URL (`http://host:port` or `…/v1`); several, comma-separated,
    /// spread the sessions over them (session i to URL i mod n: several proxies or gateways).
    #[arg(long, env = "INFERA_BENCH_URL", value_delimiter = ',', default_value = "http://127.0.0.1:8000")]
    url: Vec<String>,
    /// The model name sent in each request.
    #[arg(long, env = "INFERA_BENCH_MODEL", default_value = "m")]
    model: String,
    /// Pacing (default: open for Mooncake, closed for agentic traces).
    #[arg(long, env = "INFERA_BENCH_MODE", value_enum)]
    mode: Option<Mode>,
    /// Open loop: trace time is divided by this.
    #[arg(long, env = "INFERA_BENCH_SPEEDUP", default_value_t = 1.0)]
    speedup: f64,
    /// Closed loop: think time between turns is multiplied by this (after the cap).
    #[arg(long, env = "INFERA_BENCH_THINK_TIME_SCALE", default_value_t = 1.0)]
    think_time_scale: f64,
    /// `max_tokens` = the trace's output length × this (rounded, at least 1).
    #[arg(long, env = "INFERA_BENCH_OUTPUT_SCALE", default_value_t = 1.0)]
    output_scale: f64,
    /// Set think-time and output scales so the first `--concurrency` sessions average the
    /// seeds' ≈ 9 s think time and ≈ 1,000 output tokens (replaces both scales).
    #[arg(long, env = "INFERA_BENCH_MATCH_SEED_LOAD", conflicts_with_all = ["think_time_scale", "output_scale"])]
    match_seed_load: bool,
    /// The worker runs emulated time this many times faster (the sim's `--sim-speedup`): waits
    /// and `--duration-s` are divided by it, measured times multiplied (report in emulated time).
    #[arg(long, env = "INFERA_BENCH_TIME_COMPRESSION", default_value_t = 1.0)]
    time_compression: f64,
    /// Also sample these workers' `/v1/loads` (the decodes, `http://host:port`, comma-separated)
    /// for per-rank load.
    #[arg(long, env = "INFERA_BENCH_SAMPLE_LOADS", value_delimiter = ',')]
    sample_loads: Vec<String>,
    /// Rank sampling interval, in (emulated) seconds.
    #[arg(long, env = "INFERA_BENCH_SAMPLE_INTERVAL_S", default_value_t = 1.0)]
    sample_interval_s: f64,
    /// Trace gaps (inter-arrival, think time) are capped at this many trace seconds.
    #[arg(long, env = "INFERA_BENCH_IDLE_GAP_CAP_S", default_value_t = 300.0)]
    idle_gap_cap_s: f64,
    /// Closed loop: concurrent sessions (lanes).
    #[arg(long, env = "INFERA_BENCH_CONCURRENCY", default_value_t = 16)]
    concurrency: usize,
    /// Requests per lane left out of the report (open loop: the first N requests).
    #[arg(long, env = "INFERA_BENCH_WARMUP_PER_LANE", default_value_t = 0)]
    warmup_per_lane: usize,
    /// Requests sent in the first this many (emulated) seconds are left out too.
    #[arg(long, env = "INFERA_BENCH_WARMUP_S", default_value_t = 0.0)]
    warmup_s: f64,
    /// Cut the requests still in flight at the end of `--duration-s` (a fixed window) instead
    /// of waiting for them.
    #[arg(long, env = "INFERA_BENCH_CUT_AT_END", requires = "duration_s")]
    cut_at_end: bool,
    /// Stop sending after this many requests (warm-up included).
    #[arg(long, env = "INFERA_BENCH_MAX_REQUESTS")]
    max_requests: Option<usize>,
    /// Stop sending after this many seconds (requests in flight finish).
    #[arg(long, env = "INFERA_BENCH_DURATION_S")]
    duration_s: Option<f64>,
    /// Also write the report as JSON to this file.
    #[arg(long, env = "INFERA_BENCH_JSON")]
    json: Option<PathBuf>,
    /// Each request carries its session's name in `x-session-id`, as agentic clients name their
    /// conversation (OpenAI's `prompt_cache_key`, Anthropic's `metadata.user_id`): infera's
    /// prefill session affinity reads it; SGLang and SMG ignore the header.
    #[arg(long, env = "INFERA_BENCH_SESSION_HEADER")]
    session_header: bool,
    /// No progress line on stderr.
    #[arg(long, env = "INFERA_BENCH_QUIET")]
    quiet: bool,
}

impl ReplayArgs {
    fn shaping(&self) -> anyhow::Result<Shaping> {
        for (name, v) in [
            ("--speedup", self.speedup),
            ("--think-time-scale", self.think_time_scale + 1.0),
            ("--output-scale", self.output_scale),
            ("--idle-gap-cap-s", self.idle_gap_cap_s + 1.0),
            ("--time-compression", self.time_compression),
            ("--sample-interval-s", self.sample_interval_s),
            ("--warmup-s", self.warmup_s + 1.0),
        ] {
            anyhow::ensure!(
                v.is_finite() && v > 0.0,
                "{name} must be positive (think time and cap may be 0)"
            );
        }
        anyhow::ensure!(self.concurrency > 0, "--concurrency must be at least 1");
        Ok(Shaping {
            speedup: self.speedup,
            think_time_scale: self.think_time_scale,
            output_scale: self.output_scale,
            idle_gap_cap_s: self.idle_gap_cap_s,
            concurrency: self.concurrency,
            warmup_per_lane: self.warmup_per_lane,
            warmup_s: self.warmup_s,
            cut_at_end: self.cut_at_end,
            max_requests: self.max_requests,
            duration_s: self.duration_s,
            compression: self.time_compression,
        })
    }

    /// `--trace`, else the built-in trace of the kind the other flags ask for.
    fn source(&self) -> Source {
        let agentic = match self.format {
            Format::Auto => self.mode == Some(Mode::Closed) || self.match_seed_load,
            f => f == Format::Agentic,
        };
        let builtin = if agentic { Builtin::Agentic } else { Builtin::Mooncake };
        self.trace.clone().unwrap_or(Source::Builtin(builtin))
    }

    /// The run these flags describe (`--match-seed-load` reads the trace's first sessions).
    pub(crate) fn plan(&self) -> anyhow::Result<Plan> {
        let mut shaping = self.shaping()?;
        let trace = self.source();
        let format = match self.format {
            Format::Auto => detect(&trace)?,
            f => f,
        };
        if self.match_seed_load {
            let load = seed_load::from_trace(&trace, format, shaping.concurrency, shaping.idle_gap_cap_s)?;
            eprintln!("{load}");
            (shaping.think_time_scale, shaping.output_scale) = (load.think_time_scale, load.output_scale);
        }
        Ok(Plan {
            trace,
            format,
            urls: self.url.clone(),
            model: self.model.clone(),
            mode: self.mode,
            session_offset: 0,
            shaping,
            quiet: self.quiet,
            loads: (!self.sample_loads.is_empty()).then(|| Loads {
                pool: tokio::sync::watch::channel(self.sample_loads.clone()).1,
                interval_s: self.sample_interval_s,
                model: None,
            }),
            session_header: self.session_header,
            batch_share: None,
        })
    }
}

/// Per-rank sampling during a replay.
#[derive(Clone, Debug)]
pub(crate) struct Loads {
    /// The decode workers' base URLs at each moment (the study changes them as workers join
    /// and are drained).
    pub(crate) pool: tokio::sync::watch::Receiver<Vec<String>>,
    /// Emulated seconds between readings.
    pub(crate) interval_s: f64,
    /// The emulated engine's timing, for the modelled step (`None` for a real engine).
    pub(crate) model: Option<TimingParams>,
}

/// One replay, fully decided.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) trace: Source,
    /// Never `Auto`.
    pub(crate) format: Format,
    /// The routers' base URLs; sessions are spread over them.
    pub(crate) urls: Vec<String>,
    pub(crate) model: String,
    pub(crate) mode: Option<Mode>,
    /// Sessions of the trace skipped at the start and replayed after its end (another trace
    /// window; 0: from the first session).
    pub(crate) session_offset: usize,
    pub(crate) shaping: Shaping,
    pub(crate) quiet: bool,
    pub(crate) loads: Option<Loads>,
    /// Each request names its session in `x-session-id`.
    pub(crate) session_header: bool,
    /// This share of the sessions is `batch`, the rest `interactive`, each request naming its
    /// class in `x-infera-service-class` ([`goodput`]); `None`: no class is named.
    pub(crate) batch_share: Option<f64>,
}

pub(crate) fn run(args: ReplayArgs) -> anyhow::Result<()> {
    args.source().announce();
    let plan = args.plan()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = rt.block_on(replay(&plan))?;
    println!("{report}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json())? + "\n")?;
    }
    anyhow::ensure!(report.completed > 0, "no request completed");
    Ok(())
}

/// The first session's format, for `--format auto`.
fn detect(source: &Source) -> anyhow::Result<Format> {
    let mut reader = source.open(Format::Auto)?;
    let first = reader.next().transpose()?;
    let agentic = first.is_some_and(|s| s.turns.len() != 1 || s.block_tokens != trace::MOONCAKE_BLOCK_TOKENS);
    Ok(if agentic { Format::Agentic } else { Format::Mooncake })
}

/// Replays the trace and summarises it.
pub(crate) async fn replay(plan: &Plan) -> anyhow::Result<Report> {
    let (shaping, format) = (plan.shaping.clone(), plan.format);
    let mode = plan.mode.unwrap_or(if format == Format::Agentic { Mode::Closed } else { Mode::Open });
    anyhow::ensure!(
        !(mode == Mode::Open && format == Format::Agentic),
        "open-loop replay needs trace-wide timestamps (Mooncake); agentic sessions replay closed loop"
    );
    let sessions = plan
        .trace
        .open(format)?
        .skip(plan.session_offset)
        .chain(plan.trace.open(format)?.take(plan.session_offset));
    let origin = Instant::now();
    anyhow::ensure!(!plan.urls.is_empty(), "no URL to replay against");
    let first = Target::new(&plan.urls[0], &plan.model, origin)?;
    let mut targets = vec![first.clone()];
    for url in &plan.urls[1..] {
        targets.push(Target::new(url, &plan.model, origin)?.sharing_progress(&first));
    }
    let targets: Arc<[Target]> = targets.into();
    let sampler = plan.loads.as_ref().map(|l| {
        Sampler::start(l.pool.clone(), Duration::from_secs_f64(l.interval_s / shaping.compression), origin)
    });
    let ticker = (!plan.quiet).then(|| tokio::spawn(progress_line(first)));
    let send_shaping = shaping.clone();
    let session_header = plan.session_header;
    let batch_share = plan.batch_share;
    let send = move |job: Job| {
        let target = targets[(job.session.index % targets.len() as u64) as usize].clone();
        let shaping = send_shaping.clone();
        async move {
            let turn = &job.session.turns[job.turn];
            let max_tokens = shaping.max_tokens(turn.output_tokens);
            let session = session_header.then_some(job.session.name.as_str());
            let prompt = prompt::prompt(&job.session, job.turn);
            let class = batch_share.map(|share| goodput::Class::of(job.session.index, share));
            target
                .send(drive::Ask { prompt, session, class, input_tokens: turn.input_tokens, max_tokens })
                .await
        }
    };
    let ran: Ran<Result<Sample, DriveError>> = match mode {
        Mode::Open => schedule::open_loop(sessions, &shaping, send).await,
        Mode::Closed => schedule::closed_loop(sessions, &shaping, send).await,
    };
    if let Some(t) = ticker {
        t.abort();
        eprintln!();
    }
    let rank_samples = match sampler {
        Some(s) => Some(s.stop().await),
        None => None,
    };
    if let Some(e) = ran.trace_error {
        return Err(e.into());
    }
    let (mut samples, mut failed, mut warmup) = (Vec::new(), 0, 0);
    let mut first_error = None;
    for (job, out) in ran.done {
        match out {
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
            Ok(_) if job.warmup => warmup += 1,
            Ok(s) => samples.push(s),
        }
    }
    if let Some(e) = first_error {
        eprintln!("{failed} requests failed; the first: {e}");
    }
    let mode_name = if mode == Mode::Open { "open" } else { "closed" };
    let mut report = Report::new(plan.trace.to_string(), mode_name, shaping, &samples, failed, warmup);
    report.cut = ran.cut;
    Ok(match (rank_samples, &plan.loads) {
        (Some((ranks, errors)), Some(loads)) => {
            if errors > 0 {
                eprintln!("{errors} readings of {:?} /v1/loads failed", loads.pool.borrow());
            }
            report.with_ranks(ranks, loads.model.as_ref())
        }
        _ => report,
    })
}

/// `sent / done / failed` on stderr, once a second, overwriting itself.
async fn progress_line(target: Target) {
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let p = Arc::clone(&target.progress);
    loop {
        tick.tick().await;
        let (sent, done, failed) = (
            p.sent.load(Ordering::Relaxed),
            p.done.load(Ordering::Relaxed),
            p.failed.load(Ordering::Relaxed),
        );
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\rreplay: {:>6.0} s  sent {sent}  done {done}  failed {failed}  in flight {}   ",
            start.elapsed().as_secs_f64(),
            sent.saturating_sub(done + failed)
        );
        let _ = err.flush();
    }
}

#[cfg(test)]
mod e2e;

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::trace::{Builtin, Source};

    /// `infera-bench replay ARGS…`'s trace.
    fn source(args: &[&str]) -> Source {
        let argv = ["infera-bench", "replay"].into_iter().chain(args.iter().copied());
        let crate::Cmd::Replay(args) = crate::Args::try_parse_from(argv).unwrap().command else {
            panic!("not replay")
        };
        args.source()
    }

    #[test]
    fn without_a_trace_the_flags_pick_the_builtin_one() {
        assert_eq!(source(&[]), Source::Builtin(Builtin::Mooncake));
        assert_eq!(source(&["--mode", "open"]), Source::Builtin(Builtin::Mooncake));
        assert_eq!(source(&["--mode", "closed"]), Source::Builtin(Builtin::Agentic));
        assert_eq!(source(&["--match-seed-load"]), Source::Builtin(Builtin::Agentic));
        assert_eq!(source(&["--format", "agentic"]), Source::Builtin(Builtin::Agentic));
        assert_eq!(source(&["--format", "mooncake", "--mode", "closed"]), Source::Builtin(Builtin::Mooncake));
        assert_eq!(source(&["--trace", "builtin:agentic"]), Source::Builtin(Builtin::Agentic));
        assert_eq!(source(&["--trace", "t.jsonl.gz"]), Source::File("t.jsonl.gz".into()));
    }
}

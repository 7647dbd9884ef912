//! `infera-bench replay`: replays a request trace against an OpenAI-compatible base URL (a
//! proxy, or a worker directly) and reports throughput, TTFT, ITL and interactivity.
//!
//! - [`trace`]: Mooncake and agentic-session readers, line by line, plain or gzip.
//! - [`prompt`]: prompt text in which shared hash blocks are shared prefixes.
//! - [`schedule`]: open loop by timestamp, or closed-loop lanes with think time.
//! - [`drive`]: one streamed chat completion, timed.
//! - [`report`]: the summary, as text and as JSON (`--json FILE`).
//!
//! Mooncake replays open loop by default, agentic traces closed loop; `--mode` overrides
//! (closed loop over Mooncake treats each request as a one-turn session).

mod drive;
mod prompt;
mod report;
mod schedule;
pub(crate) mod trace;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use drive::{DriveError, Target};
use report::{Report, Sample};
use schedule::{Job, Ran, Shaping};
use trace::Format;

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
    /// The trace: Mooncake JSONL or agentic session JSONL, optionally `.gz`.
    #[arg(long, env = "INFERA_BENCH_TRACE")]
    trace: PathBuf,
    /// The trace format.
    #[arg(long, env = "INFERA_BENCH_FORMAT", value_enum, default_value_t = Format::Auto)]
    format: Format,
    /// The OpenAI-compatible base URL (`http://host:port` or `…/v1`).
    #[arg(long, env = "INFERA_BENCH_URL", default_value = "http://127.0.0.1:8000")]
    url: String,
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
    /// Trace gaps (inter-arrival, think time) are capped at this many trace seconds.
    #[arg(long, env = "INFERA_BENCH_IDLE_GAP_CAP_S", default_value_t = 300.0)]
    idle_gap_cap_s: f64,
    /// Closed loop: concurrent sessions (lanes).
    #[arg(long, env = "INFERA_BENCH_CONCURRENCY", default_value_t = 16)]
    concurrency: usize,
    /// Requests per lane left out of the report (open loop: the first N requests).
    #[arg(long, env = "INFERA_BENCH_WARMUP_PER_LANE", default_value_t = 0)]
    warmup_per_lane: usize,
    /// Stop sending after this many requests (warm-up included).
    #[arg(long, env = "INFERA_BENCH_MAX_REQUESTS")]
    max_requests: Option<usize>,
    /// Stop sending after this many seconds (requests in flight finish).
    #[arg(long, env = "INFERA_BENCH_DURATION_S")]
    duration_s: Option<f64>,
    /// Also write the report as JSON to this file.
    #[arg(long, env = "INFERA_BENCH_JSON")]
    json: Option<PathBuf>,
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
            max_requests: self.max_requests,
            duration_s: self.duration_s,
        })
    }
}

pub(crate) fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = rt.block_on(replay(&args))?;
    println!("{report}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json())? + "\n")?;
    }
    anyhow::ensure!(report.completed > 0, "no request completed");
    Ok(())
}

/// The first session's format, for `--format auto`.
fn detect(path: &Path) -> anyhow::Result<Format> {
    let mut reader = trace::open(path, Format::Auto)?;
    let first = reader.next().transpose()?;
    let agentic = first.is_some_and(|s| s.turns.len() != 1 || s.block_tokens != trace::MOONCAKE_BLOCK_TOKENS);
    Ok(if agentic { Format::Agentic } else { Format::Mooncake })
}

/// Replays the trace and summarises it.
pub(crate) async fn replay(args: &ReplayArgs) -> anyhow::Result<Report> {
    let shaping = args.shaping()?;
    let format = match args.format {
        Format::Auto => detect(&args.trace)?,
        f => f,
    };
    let mode = args.mode.unwrap_or(if format == Format::Agentic { Mode::Closed } else { Mode::Open });
    anyhow::ensure!(
        !(mode == Mode::Open && format == Format::Agentic),
        "open-loop replay needs trace-wide timestamps (Mooncake); agentic sessions replay closed loop"
    );
    let sessions = trace::open(&args.trace, format)?;
    let target = Target::new(&args.url, &args.model, Instant::now())?;
    let ticker = (!args.quiet).then(|| tokio::spawn(progress_line(target.clone())));
    let send_shaping = shaping.clone();
    let send = move |job: Job| {
        let (target, shaping) = (target.clone(), send_shaping.clone());
        async move {
            let turn = &job.session.turns[job.turn];
            let max_tokens = shaping.max_tokens(turn.output_tokens);
            target.send(prompt::prompt(&job.session, job.turn), max_tokens).await
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
    Ok(Report::new(args.trace.display().to_string(), mode_name, shaping, &samples, failed, warmup))
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

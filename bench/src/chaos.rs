//! Chaos benchmark: a closed loop of streamed and whole chat completions through two proxies
//! while the deployment is broken in every way the router claims to survive, on a seeded,
//! deterministic schedule — then whether any request hung, which errors reached clients (and
//! whether a retry could have saved them), and whether anything was left booked or running.
//!
//! One run ([`deploy`]): a real etcd, 2 prefill + 2 decode sims registered in it, one
//! `infera-control` process following it, 2 `infera-proxy` processes. During the load
//! ([`load`]): fault knobs on `decode-0` and `prefill-0` (`POST /sim/faults`: bursts of 500s,
//! connections cut mid-stream, streams that stall) set and cleared at seeded moments
//! ([`schedule`]); client cancels; and one of each outage ([`events`]): a proxy SIGKILLed and
//! restarted, control SIGKILLed and restarted, etcd stopped for `--etcd-down-secs`. Then the
//! faults are cleared, the ledger and the engines are awaited back at zero, and [`report`] prints
//! the table.

mod deploy;
mod events;
mod load;
mod report;
mod schedule;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use infera_testkit::http::{get_ok, post_json};

use schedule::{Faulty, Schedule};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ChaosArgs {
    /// Requests in all.
    #[arg(long, env = "INFERA_BENCH_REQUESTS", default_value_t = 10_000)]
    pub(crate) requests: usize,
    /// Closed-loop clients (each sends its next request when one ends).
    #[arg(long, env = "INFERA_BENCH_CONCURRENCY", default_value_t = 32)]
    pub(crate) concurrency: usize,
    /// Fewest tokens a request asks for.
    #[arg(long, env = "INFERA_BENCH_MIN_TOKENS", default_value_t = 8)]
    pub(crate) min_tokens: u32,
    /// Most tokens a request asks for (each draws its length uniformly between the two).
    #[arg(long, env = "INFERA_BENCH_MAX_TOKENS", default_value_t = 128)]
    pub(crate) max_tokens: u32,
    /// Share of the requests streamed (the others are answered whole).
    #[arg(long, env = "INFERA_BENCH_STREAM_SHARE", default_value_t = 0.5)]
    pub(crate) stream_share: f64,
    /// Share of the requests the client cancels (drops), each after a delay drawn up to
    /// `--cancel-within-ms`.
    #[arg(long, env = "INFERA_BENCH_CANCEL_SHARE", default_value_t = 0.1)]
    pub(crate) cancel_share: f64,
    #[arg(long, env = "INFERA_BENCH_CANCEL_WITHIN_MS", default_value_t = 100)]
    pub(crate) cancel_within_ms: u64,
    /// Every request's client timeout: a request not ended by then is counted as hung.
    #[arg(long, env = "INFERA_BENCH_CLIENT_TIMEOUT_MS", default_value_t = 30_000)]
    pub(crate) client_timeout_ms: u64,
    /// The proxies' `--request-timeout-ms` (to the answer's head).
    #[arg(long, env = "INFERA_BENCH_REQUEST_TIMEOUT_MS", default_value_t = 5_000)]
    pub(crate) request_timeout_ms: u64,
    /// The proxies' `--attempt-timeout-ms`: an attempt with no first byte by then is retried
    /// elsewhere (room for two within --request-timeout-ms).
    #[arg(long, env = "INFERA_BENCH_ATTEMPT_TIMEOUT_MS", default_value_t = 1_500)]
    pub(crate) attempt_timeout_ms: u64,
    /// The proxies' `--stream-idle-timeout-ms`: a begun stream silent this long is cut.
    #[arg(long, env = "INFERA_BENCH_STREAM_IDLE_TIMEOUT_MS", default_value_t = 2_000)]
    pub(crate) stream_idle_timeout_ms: u64,
    /// The proxies' `--pick-timeout-ms` (the proxy's default).
    #[arg(long, env = "INFERA_BENCH_PICK_TIMEOUT_MS", default_value_t = 50)]
    pub(crate) pick_timeout_ms: u64,
    /// The proxies' `--lease-ttl-ms`: how long control keeps a killed proxy's legs.
    #[arg(long, env = "INFERA_BENCH_PROXY_LEASE_TTL_MS", default_value_t = 3_000)]
    pub(crate) proxy_lease_ttl_ms: u64,
    /// Control's `--eject-open-ms`.
    #[arg(long, env = "INFERA_BENCH_EJECT_OPEN_MS", default_value_t = 3_000)]
    pub(crate) eject_open_ms: u64,
    /// The sims' time compression.
    #[arg(long, env = "INFERA_BENCH_SIM_SPEEDUP", default_value_t = 10.0)]
    pub(crate) sim_speedup: f64,
    /// The sims' `--sim-bootstrap-timeout-ms`: how long a decode waits for its KV (SGLang's
    /// bootstrap / waiting timeout), in model ms: 100 s is 10 s of wall clock at the default 10x.
    #[arg(long, env = "INFERA_BENCH_SIM_BOOTSTRAP_TIMEOUT_MS", default_value_t = 100_000)]
    pub(crate) sim_bootstrap_timeout_ms: u64,
    /// How long the killed proxy stays down before its restart (ms).
    #[arg(long, env = "INFERA_BENCH_PROXY_DOWN_MS", default_value_t = 1_000)]
    pub(crate) proxy_down_ms: u64,
    /// How long etcd stays stopped (s).
    #[arg(long, env = "INFERA_BENCH_ETCD_DOWN_SECS", default_value_t = 20)]
    pub(crate) etcd_down_secs: u64,
    /// How long the ledger and the engines may take to return to zero after the load (s).
    #[arg(long, env = "INFERA_BENCH_DRAIN_SECS", default_value_t = 90)]
    pub(crate) drain_secs: u64,
    /// Seed of the requests, the fault schedule, the outages and the sims.
    #[arg(long, env = "INFERA_BENCH_SEED", default_value_t = 1)]
    pub(crate) seed: u64,
}

pub(crate) fn run(args: ChaosArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.requests >= 100, "--requests must be at least 100");
    anyhow::ensure!(args.min_tokens <= args.max_tokens, "--min-tokens is above --max-tokens");
    anyhow::ensure!((0.0..=1.0).contains(&args.stream_share), "--stream-share is a share (0–1)");
    anyhow::ensure!((0.0..=1.0).contains(&args.cancel_share), "--cancel-share is a share (0–1)");
    crate::binaries::release_binaries("chaos", &["infera-control", "infera-proxy"])?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(bench(args))
}

/// The fault shape of a run of `requests`.
fn shape(requests: usize) -> schedule::Shape {
    schedule::Shape {
        requests,
        fails: 3,
        fail_burst: (3, 15),
        dies: 2,
        die_len: (requests / 250, requests / 80),
        decode_stalls: 2,
        prefill_stalls: 2,
        stall_len: (requests / 1_000, requests / 400),
        decode_after_tokens: (1, 6),
    }
}

async fn bench(args: ChaosArgs) -> anyhow::Result<()> {
    let spec = deploy::Spec {
        speedup: args.sim_speedup,
        bootstrap_timeout_ms: args.sim_bootstrap_timeout_ms,
        seed: args.seed,
        control_flags: ["--decode-input-demand", "on", "--eject-open-ms", &args.eject_open_ms.to_string()]
            .map(str::to_owned)
            .into(),
        proxy_flags: [
            "--pick-timeout-ms",
            &args.pick_timeout_ms.to_string(),
            "--request-timeout-ms",
            &args.request_timeout_ms.to_string(),
            "--attempt-timeout-ms",
            &args.attempt_timeout_ms.to_string(),
            "--stream-idle-timeout-ms",
            &args.stream_idle_timeout_ms.to_string(),
            "--lease-ttl-ms",
            &args.proxy_lease_ttl_ms.to_string(),
        ]
        .map(str::to_owned)
        .into(),
    };
    let sched = Schedule::draw(&shape(args.requests), args.seed);
    let wall = Instant::now();
    let mut d = deploy::Deployment::start(&spec).await?;
    report::header(&args, &spec, &sched);

    let rotation = Arc::new(load::Rotation::new(d.proxy_urls()));
    let plan = load::Plan {
        requests: args.requests,
        concurrency: args.concurrency,
        tokens: (args.min_tokens, args.max_tokens),
        stream_share: args.stream_share,
        cancel_share: args.cancel_share,
        cancel_within: Duration::from_millis(args.cancel_within_ms),
        timeout: Duration::from_millis(args.client_timeout_ms),
        seed: args.seed,
    };
    let load = load::Load::start(plan, rotation.clone());
    let progress = load.progress();
    let urls = [d.sim("decode-0").url.clone(), d.sim("prefill-0").url.clone()];
    let toggler = tokio::spawn(toggle_faults(sched.faults.clone(), urls.clone(), progress.clone()));
    let outage_plan = events::Plan {
        proxy_kill: sched.proxy_kill,
        control_kill: sched.control_kill,
        etcd_stop: sched.etcd_stop,
        proxy_down: Duration::from_millis(args.proxy_down_ms),
        etcd_down: Duration::from_secs(args.etcd_down_secs),
    };
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = tokio::spawn(watch_ejections(
        format!("http://{}/metrics", d.cluster.control.metrics_addr),
        watching.clone(),
    ));
    let outages = events::run(&mut d, &outage_plan, &progress, &rotation).await.context("an outage")?;
    toggler.await??;
    let records = load.finish().await?;
    let load_secs = wall.elapsed().as_secs_f64();
    watching.store(false, Ordering::SeqCst);
    let ejected = watcher.await?;
    for url in &urls {
        clear_faults(url).await?;
    }

    let t0 = Instant::now();
    let left_at_load_end = d.targets().await.unwrap_or_default();
    let drained = infera_testkit::poll(
        Duration::from_secs(args.drain_secs),
        "the ledger and the engines to return to zero",
        async || report::at_zero(&d).await.then_some(()),
    )
    .await
    .is_ok();
    let drain = t0.elapsed();
    let mut end = report::End::read(&mut d, drained.then_some(drain)).await;
    end.left_at_load_end = left_at_load_end;
    end.ejected = ejected;
    report::print(&args, &sched, &records, &outages, &end, load_secs);
    d.stop().await
}

/// Every target control's `infera_router_target_ejected` gauge showed at 1, read every 200 ms
/// (an ejection lasts `--eject-open-ms`) until `watching` is cleared.
async fn watch_ejections(url: String, watching: Arc<AtomicBool>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    while watching.load(Ordering::SeqCst) {
        let text = tokio::time::timeout(Duration::from_secs(1), get_ok(&url)).await;
        for line in text.ok().and_then(Result::ok).unwrap_or_default().lines() {
            let Some(rest) = line.strip_prefix("infera_router_target_ejected{target=\"") else { continue };
            if let Some((target, value)) = rest.split_once("\"} ")
                && value.trim() == "1"
            {
                seen.insert(target.to_owned());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// Sets each knob when its moment of the schedule comes.
async fn toggle_faults(
    steps: Vec<schedule::FaultStep>,
    urls: [String; 2],
    progress: load::Progress,
) -> anyhow::Result<()> {
    for step in steps {
        progress.reached(step.at).await;
        let url = match step.sim {
            Faulty::Decode => &urls[0],
            Faulty::Prefill => &urls[1],
        };
        let (status, body) = post_json(&format!("{url}/sim/faults"), &step.body).await?;
        anyhow::ensure!(status.is_success(), "POST {url}/sim/faults {}: {status} {body}", step.body);
    }
    Ok(())
}

async fn clear_faults(url: &str) -> anyhow::Result<()> {
    let off = serde_json::json!({"fail_next": 0, "stall_after_tokens": null, "die_after_tokens": null});
    let (status, body) = post_json(&format!("{url}/sim/faults"), &off).await?;
    anyhow::ensure!(status.is_success(), "POST {url}/sim/faults: {status} {body}");
    Ok(())
}

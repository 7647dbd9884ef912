//! Proxy benchmark: the added cost of the proxy path (client → proxy → sim) against client →
//! sim directly, measured in the same run, and the proxy's memory per in-flight stream.
//!
//! One process hosts control and an aggregated `infera-sim` worker (8 attention-DP ranks);
//! the proxy runs as its own process (the release binary next to this one), so its resident
//! memory can be read from `/proc`. For each concurrency, rounds alternate direct and proxied
//! (same requests, same worker) and the report gives TTFT p50 of each, the difference, and
//! the streamed tokens/s ratio.
//!
//! SMG (`smg launch --worker-urls … --dp-aware`, the peer gateway) is measured as a third side in
//! front of the same sim, pinned as the proxy is. A peak-rate round (short non-streamed requests,
//! closed loop, many clients) then gives requests/s of each side.
//!
//! By default all of it shares the machine's CPUs; `--proxy-cpus` pins the proxy to CPUs of its
//! own and the bench process to the rest (see [`placement`]).

mod peak;
mod placement;
mod scrape;
mod smg;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tokio::net::TcpListener;

use infera_launcher::records::worker_record;
use infera_testkit::sim::Prepared;
use infera_testkit::{ControlSpec, SimSpec, Workers};
use placement::{CpuList, Placement};

const MODEL: &str = "m";
const RANKS: u32 = 8;
/// Tokens asked for by the streams held open for the memory measurement (they are dropped long
/// before they could finish).
const HELD_STREAM_TOKENS: u32 = 100_000;

#[derive(clap::Args, Debug)]
pub(crate) struct ProxyArgs {
    /// Concurrent streams per measurement.
    #[arg(long, env = "INFERA_BENCH_CONCURRENCY", value_delimiter = ',', default_value = "1,64")]
    concurrency: Vec<usize>,
    /// Requests per round (at least the concurrency).
    #[arg(long, env = "INFERA_BENCH_REQUESTS", default_value_t = 128)]
    requests: usize,
    /// Alternating rounds per side.
    #[arg(long, env = "INFERA_BENCH_ROUNDS", default_value_t = 3)]
    rounds: usize,
    /// Tokens generated per request.
    #[arg(long, env = "INFERA_BENCH_MAX_TOKENS", default_value_t = 64)]
    max_tokens: u32,
    /// The sim's time compression.
    #[arg(long, env = "INFERA_BENCH_SIM_SPEEDUP", default_value_t = 10.0)]
    sim_speedup: f64,
    /// In-flight streams for the memory measurement (0 = skip).
    #[arg(long, env = "INFERA_BENCH_RSS_STREAMS", default_value_t = 1_000)]
    rss_streams: usize,
    /// Pin the proxy process to these CPUs (e.g. `1`, `2-3`, `0,2`) and the bench process
    /// (clients, control, sim) to the CPUs left; default: unpinned, all share every CPU.
    #[arg(long, env = "INFERA_BENCH_PROXY_CPUS", value_name = "LIST")]
    proxy_cpus: Option<CpuList>,
    /// The proxy binary (default: `infera-proxy` beside this binary).
    #[arg(long, env = "INFERA_BENCH_PROXY_BIN")]
    proxy_bin: Option<PathBuf>,
    /// SMG to measure beside the proxy (default: the workspace's `.venv/bin/smg`; `none`: skip).
    #[arg(long, env = "INFERA_BENCH_SMG")]
    smg: Option<PathBuf>,
    /// Closed-loop clients of the peak-rate round (0 = skip it).
    #[arg(long, env = "INFERA_BENCH_PEAK_CLIENTS", default_value_t = 64)]
    peak_clients: usize,
    /// Seconds of each peak-rate measurement (two per side, alternating).
    #[arg(long, env = "INFERA_BENCH_PEAK_SECS", default_value_t = 5)]
    peak_secs: u64,
    /// Control's decode policy flags, space-separated (e.g. `--decode-input-demand off` for
    /// the legacy round robin, or `--decode-request-weight 1000000`).
    #[arg(
        long,
        env = "INFERA_BENCH_CONTROL_FLAGS",
        value_delimiter = ' ',
        allow_hyphen_values = true,
        default_value = "--decode-input-demand on"
    )]
    control_flags: Vec<String>,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

struct ProxyProcess(Child);

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn run(args: ProxyArgs) -> anyhow::Result<()> {
    // Before any thread starts: every thread of the bench inherits this thread's CPUs.
    let placement = Placement::apply(args.proxy_cpus.clone())?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(bench(args, placement))
}

async fn bench(args: ProxyArgs, placement: Placement) -> anyhow::Result<()> {
    // The worker and control each run on a runtime of their own (as on machines of their own):
    // a pick must not queue behind the sim's streams in one shared runtime.
    let http = std::net::TcpListener::bind("127.0.0.1:0")?;
    http.set_nonblocking(true)?;
    let sim_addr = http.local_addr()?;
    let sim = SimSpec::mixed("mixed-0", MODEL, RANKS).model_path("m").seed(1).speedup(args.sim_speedup);
    let Prepared { config: sim_config, plan, .. } = sim.config(sim_addr.port(), None)?;
    own_runtime("sim", move || async move {
        let http = TcpListener::from_std(http)?;
        infera_sim::run(infera_sim::Listeners { http, bootstrap: None }, sim_config, std::future::pending())
            .await
    })?;

    let control =
        ControlSpec::new(Workers::Records(vec![worker_record(&plan)])).flags(args.control_flags.clone());
    let (config, _workers) = ControlSpec { seed: None, ..control }.config()?;
    let grpc = std::net::TcpListener::bind("127.0.0.1:0")?;
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")?;
    grpc.set_nonblocking(true)?;
    metrics.set_nonblocking(true)?;
    let control_addr = grpc.local_addr()?;
    let control_metrics = metrics.local_addr()?.to_string();
    own_runtime("control", move || async move {
        let listeners = infera_control::Listeners {
            grpc: TcpListener::from_std(grpc)?,
            admin: None,
            metrics: TcpListener::from_std(metrics)?,
        };
        infera_control::run(listeners, config, std::future::pending()).await
    })?;

    // The proxy, as its own process.
    let bin = match args.proxy_bin.clone() {
        Some(b) => b,
        None => std::env::current_exe()?.with_file_name("infera-proxy"),
    };
    let mut cmd = Command::new(&bin);
    cmd.args(["--listen", "127.0.0.1:0", "--control", &format!("http://{control_addr}")])
        .env("INFERA_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = placement.spawn(&mut cmd).map_err(|e| {
        anyhow::anyhow!(
            "cannot start {}: {e:#} (build it: cargo build --release -p infera-proxy)",
            bin.display()
        )
    })?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    let proxy = ProxyProcess(child);
    let proxy_addr = line.trim().rsplit("http=").next().unwrap_or_default().to_owned();
    let client: HttpClient = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build_http();
    wait_ready(&client, &proxy_addr).await?;
    let smg_bin =
        args.smg.clone().unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/smg"));
    let smg = if smg_bin.as_os_str() == "none" {
        None
    } else {
        let log = std::env::temp_dir().join("infera-bench-proxy-smg.log");
        let smg = smg::SmgProcess::start(&smg_bin, &format!("http://{sim_addr}"), &placement, &log)?;
        wait_ready(&client, &smg.addr)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}; SMG's log: {}", log.display()))?;
        Some(smg)
    };
    // Every thread of both processes has started by now (runtimes are built before serving).
    let (proxy_cpus, bench_cpus) = placement.check(proxy.0.id())?;
    if let Some(smg) = &smg {
        placement.check(smg.id())?;
    }

    let direct = format!("http://{sim_addr}/v1/chat/completions");
    let proxied = format!("http://{proxy_addr}/v1/chat/completions");
    let mut sides = vec![("direct", direct.clone()), ("proxy", proxied.clone())];
    if let Some(smg) = &smg {
        sides.push(("smg", format!("http://{}/v1/chat/completions", smg.addr)));
    }
    println!(
        "proxy path vs direct to the worker: {} rounds per side, {} requests per round, {} tokens each, sim speed-up {}",
        args.rounds, args.requests, args.max_tokens, args.sim_speedup
    );
    println!(
        "placement: {placement} (checked in /proc: proxy threads on CPUs {proxy_cpus}, bench threads on CPUs {bench_cpus})"
    );
    println!("control: {}", args.control_flags.join(" "));
    println!(
        "  {:>11} {:>7} {:>13} {:>10} {:>10} {:>7}",
        "concurrency", "side", "TTFT p50", "added ms", "tok/s", "ratio"
    );
    let pick_scrape = scrape::PickScrape { client: &client, proxy: &proxy_addr, control: &control_metrics };
    // Warm-up: connections on every path.
    for (_, url) in &sides {
        round(&client, url, 8, 8, args.max_tokens).await?;
    }
    for &c in &args.concurrency {
        let n = args.requests.max(c);
        let mut seen: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); sides.len()];
        let mut picks = Vec::new();
        for _ in 0..args.rounds {
            for ((side, url), (ttfts, rates)) in sides.iter().zip(&mut seen) {
                let (r, means) =
                    pick_scrape.during(*side == "proxy", round(&client, url, n, c, args.max_tokens)).await?;
                picks.extend(means.map(|m| m.to_string()));
                ttfts.extend(r.ttfts);
                rates.push(r.tokens_per_s);
            }
        }
        let p50s: Vec<(f64, f64)> = seen.iter_mut().map(|(t, r)| (p50(t), p50(r))).collect();
        for ((side, _), (ttft, rate)) in sides.iter().zip(&p50s) {
            let (added, ratio) = (ttft - p50s[0].0, rate / p50s[0].1);
            println!("  {c:>11} {side:>7} {ttft:>10.2} ms {added:>10.2} {rate:>10.0} {ratio:>7.3}");
        }
        println!("  {c:>11} the proxy's decode pick, mean per round: {}", picks.join(", "));
    }
    println!("  goals: added TTFT p50 ≤ 1 ms, proxied tok/s ≥ 0.97 of direct");
    if args.peak_clients > 0 {
        let length = Duration::from_secs(args.peak_secs);
        peak::report(&client, &sides, &sim_addr.to_string(), args.peak_clients, length, &pick_scrape).await?;
    }

    if args.rss_streams > 0 {
        let idle = rss_kib(proxy.0.id())?;
        let n = args.rss_streams;
        let mut held = Vec::new();
        for _ in 0..n {
            let req = request(&proxied, HELD_STREAM_TOKENS, true);
            let client = client.clone();
            held.push(tokio::spawn(async move {
                let resp = client.request(req).await?;
                anyhow::ensure!(resp.status().is_success(), "status {}", resp.status());
                let mut body = resp.into_body();
                // Read the first event, then hold the stream open until dropped.
                let _ = body.frame().await;
                std::future::pending::<()>().await;
                Ok::<_, anyhow::Error>(body)
            }));
        }
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            let inflight = scrape::inflight(&client, &proxy_addr).await?;
            if inflight >= n as f64 {
                break;
            }
            if let Some(failed) = held.iter().position(tokio::task::JoinHandle::is_finished) {
                let err = held.swap_remove(failed).await?;
                anyhow::bail!("a held stream ended early: {:?}", err.err());
            }
            anyhow::ensure!(Instant::now() < end, "only {inflight} of {n} streams in flight");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let loaded = rss_kib(proxy.0.id())?;
        for h in held {
            h.abort();
        }
        println!(
            "proxy resident memory: {idle} KiB idle, {loaded} KiB with {n} streams in flight → {:.1} MiB per 1,000 streams",
            (loaded.saturating_sub(idle)) as f64 / 1024.0 * 1_000.0 / n as f64
        );
    }
    drop(proxy);
    Ok(())
}

/// Runs a server on a one-thread runtime of its own, for the life of the process.
fn own_runtime<F, Fut>(name: &str, serve: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    // Its worker thread is named after it too, so that `top -H` or `perf` tells them apart.
    let worker = format!("{name}-rt");
    std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(worker)
            .enable_all()
            .build();
        match rt {
            Ok(rt) => {
                if let Err(e) = rt.block_on(serve()) {
                    eprintln!("bench server failed: {e:#}");
                }
            }
            Err(e) => eprintln!("cannot build a runtime: {e}"),
        }
    })?;
    Ok(())
}

struct Round {
    ttfts: Vec<f64>,
    tokens_per_s: f64,
}

fn request(url: &str, max_tokens: u32, stream: bool) -> http::Request<Full<Bytes>> {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Benchmark the proxy path, please."}],
        "max_tokens": max_tokens,
        "stream": stream,
    });
    http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request")
}

/// `n` streamed requests, `c` at a time; TTFT in ms per request and tokens/s over the round.
async fn round(client: &HttpClient, url: &str, n: usize, c: usize, max_tokens: u32) -> anyhow::Result<Round> {
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(c));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let permit = sem.clone().acquire_owned().await?;
        let (client, req) = (client.clone(), request(url, max_tokens, true));
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let sent = Instant::now();
            let resp = client.request(req).await?;
            anyhow::ensure!(resp.status().is_success(), "status {}", resp.status());
            let mut body = resp.into_body();
            let mut ttft = None;
            let mut done = false;
            while let Some(frame) = body.frame().await {
                let frame = frame?;
                if let Some(d) = frame.data_ref() {
                    if ttft.is_none() && !d.is_empty() {
                        ttft = Some(sent.elapsed().as_secs_f64() * 1e3);
                    }
                    done |= d.windows(12).any(|w| w == b"data: [DONE]");
                }
            }
            anyhow::ensure!(done, "stream ended without [DONE]");
            Ok(ttft.unwrap_or_default())
        }));
    }
    let mut ttfts = Vec::with_capacity(n);
    for t in tasks {
        ttfts.push(t.await??);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Round { ttfts, tokens_per_s: (n as f64 * f64::from(max_tokens)) / secs })
}

fn p50(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn wait_ready(client: &HttpClient, addr: &str) -> anyhow::Result<()> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let req = http::Request::get(format!("http://{addr}/v1/models")).body(Full::new(Bytes::new()))?;
        if let Ok(resp) = client.request(req).await {
            let body = resp.into_body().collect().await?.to_bytes();
            if String::from_utf8_lossy(&body).contains(MODEL) {
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < end, "proxy at {addr} never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resident memory of a process, from `/proc/<pid>/status`.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))
}

//! `sglang-soak`: mixed PD and aggregated requests against real SGLang 0.5.23 servers (the tiny
//! model on this machine's CPUs, from `cargo xtask setup`) through two proxies and one control,
//! with clients that hang up. Every request that is not cancelled is also sent straight to the
//! same workers (a PD request to both legs at once, as the simplest PD client does), the two in
//! alternating order, so each gives a paired difference: infera's added time to first byte and
//! to the end. Reports how every request ended, the paired differences over runs, and what the
//! ledger, the reservations and the engines hold at the end (all must be zero).

mod client;
mod requests;

use std::sync::Arc;
use std::time::Duration;

use infera_proto::pb;
use infera_testkit::{Cluster, ClusterSpec, ControlSpec, Engine, EngineSpec, Workers};
use tokio::sync::Semaphore;

use self::client::{End, Route, send};
use self::requests::{AGG_MODEL, Drawn, Mix, PD_MODEL, draw};
use crate::replay::percentile::percentile;

/// `infera-bench sglang-soak`.
#[derive(clap::Args, Debug)]
pub(crate) struct SoakArgs {
    /// Requests per run (each non-cancelled one is also sent directly).
    #[arg(long, env = "INFERA_SOAK_REQUESTS", default_value_t = 300)]
    requests: usize,
    /// Runs (each with its own seed: seed + run).
    #[arg(long, env = "INFERA_SOAK_RUNS", default_value_t = 3)]
    runs: u64,
    /// Requests in flight at once.
    #[arg(long, env = "INFERA_SOAK_CONCURRENCY", default_value_t = 8)]
    concurrency: usize,
    /// The share of requests the client hangs up on.
    #[arg(long, env = "INFERA_SOAK_CANCEL_SHARE", default_value_t = 0.1)]
    cancel_share: f64,
    /// The share sent to the PD pair (the rest to the aggregated worker).
    #[arg(long, env = "INFERA_SOAK_PD_SHARE", default_value_t = 0.5)]
    pd_share: f64,
    /// Seed of the first run.
    #[arg(long, env = "INFERA_SOAK_SEED", default_value_t = 1)]
    seed: u64,
}

/// The client timeout of one request.
const TIMEOUT: Duration = Duration::from_secs(60);
/// How long the ledger and the engines may take to return to zero after a run.
const SETTLE: Duration = Duration::from_secs(30);

pub(crate) fn run(args: SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.requests >= 10 && args.runs >= 1, "--requests ≥ 10 and --runs ≥ 1");
    anyhow::ensure!((0.0..=1.0).contains(&args.cancel_share), "--cancel-share is a share (0–1)");
    anyhow::ensure!((0.0..=1.0).contains(&args.pd_share), "--pd-share is a share (0–1)");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(bench(args))
}

/// The servers: a PD pair (page size 16, KV events from the prefill) and an aggregated worker.
struct Engines {
    prefill: Engine,
    decode: Engine,
    mixed: Engine,
}

async fn bench(args: SoakArgs) -> anyhow::Result<()> {
    eprintln!("sglang-soak: starting three SGLang 0.5.23 servers (about 20-60 s)");
    let (prefill, decode, mixed) = tokio::join!(
        EngineSpec::prefill("prefill-0", PD_MODEL).page_size(16).kv_events("kv").start(),
        EngineSpec::decode("decode-0", PD_MODEL).page_size(16).start(),
        EngineSpec::mixed("mixed-0", AGG_MODEL).start(),
    );
    let engines = Engines { prefill: prefill?, decode: decode?, mixed: mixed? };
    let records = [&engines.prefill, &engines.decode, &engines.mixed].map(|e| e.record.clone());
    let mut spec = ClusterSpec::new(PD_MODEL, Vec::new()).running(records);
    spec.control = ControlSpec::new(Workers::None).flags(["--decode-input-demand", "on"]);
    let tokenizer = infera_testkit::engine::model_dir().join("tokenizer.json");
    spec.proxy_flags = vec!["--tokenizer".into(), tokenizer.display().to_string()];
    spec.processes = std::env::var_os("INFERA_BIN_DIR").is_some();
    let cluster = spec.start().await?;
    println!(
        "sglang-soak: {} requests × {} runs, {} at once, {:.0} % PD, {:.0} % cancelled; control and proxies {}",
        args.requests,
        args.runs,
        args.concurrency,
        args.pd_share * 100.0,
        args.cancel_share * 100.0,
        if spec_processes() {
            "as processes of INFERA_BIN_DIR"
        } else {
            "in this process (set INFERA_BIN_DIR for processes)"
        }
    );
    let mut runs = Vec::new();
    for run in 0..args.runs {
        let report = one_run(&args, args.seed + run, &engines, &cluster).await?;
        report.print(run);
        runs.push(report);
    }
    summary(&runs);
    cluster.stop().await?;
    for e in [engines.prefill, engines.decode, engines.mixed] {
        e.stop().await;
    }
    anyhow::ensure!(runs.iter().all(Report::clean), "a run ended with errors or something left booked");
    Ok(())
}

fn spec_processes() -> bool {
    std::env::var_os("INFERA_BIN_DIR").is_some()
}

/// One run's outcomes.
#[derive(Debug, Default)]
struct Report {
    ok: usize,
    errors: Vec<String>,
    cancelled: usize,
    broken: Vec<String>,
    hung: usize,
    direct_failed: Vec<String>,
    /// Paired differences, proxied − direct, ms.
    added_first_byte: Vec<f64>,
    added_total: Vec<f64>,
    /// Direct totals, ms (for the ratio).
    direct_total: Vec<f64>,
    held_after: u64,
    reservations_after: usize,
    engines_after: u64,
    drift_after: i64,
}

impl Report {
    fn clean(&self) -> bool {
        self.errors.is_empty()
            && self.broken.is_empty()
            && self.hung == 0
            && self.direct_failed.is_empty()
            && self.held_after == 0
            && self.reservations_after == 0
            && self.engines_after == 0
            && self.drift_after == 0
    }

    fn print(&self, run: u64) {
        let p = |v: &[f64], q| percentile(v, q).unwrap_or(f64::NAN);
        println!(
            "run {run}: ok {}  cancelled {}  errors {}  broken {}  hung {}  direct failures {}",
            self.ok,
            self.cancelled,
            self.errors.len(),
            self.broken.len(),
            self.hung,
            self.direct_failed.len()
        );
        println!(
            "  added by infera (paired, ms): first byte median {:+.1} p90 {:+.1}; end median {:+.1} p90 {:+.1}; \
             end ratio (median proxied / median direct) {:.3}",
            p(&self.added_first_byte, 50.0),
            p(&self.added_first_byte, 90.0),
            p(&self.added_total, 50.0),
            p(&self.added_total, 90.0),
            (p(&self.direct_total, 50.0) + p(&self.added_total, 50.0)) / p(&self.direct_total, 50.0),
        );
        println!(
            "  at the end: ledger held {}  reservations {}  engines running+queued {}  drift {}",
            self.held_after, self.reservations_after, self.engines_after, self.drift_after
        );
        for e in self.errors.iter().chain(&self.broken).chain(&self.direct_failed).take(5) {
            println!("  e.g. {}", e.chars().take(300).collect::<String>());
        }
    }
}

async fn one_run(args: &SoakArgs, seed: u64, engines: &Engines, cluster: &Cluster) -> anyhow::Result<Report> {
    let mix = Mix {
        pd_share: args.pd_share,
        stream_share: 0.5,
        cancel_share: args.cancel_share,
        cancel_within: Duration::from_millis(300),
        words: (10, 600),
        tokens: (8, 64),
    };
    let proxies = cluster.proxy_urls();
    let pair = Route::Pair {
        prefill: engines.prefill.url.clone(),
        host: "127.0.0.1".into(),
        bootstrap_port: engines.prefill.record.bootstrap_port.unwrap_or_default(),
        decode: engines.decode.url.clone(),
    };
    let worker = Route::Worker(engines.mixed.url.clone());
    let http = client::client();
    let gate = Arc::new(Semaphore::new(args.concurrency));
    let mut tasks = Vec::new();
    for index in 0..args.requests {
        let d = draw(&mix, seed, index);
        let proxied = Route::Proxy(proxies[index % proxies.len()].clone());
        let direct = if d.pd { pair.clone() } else { worker.clone() };
        let (http, gate) = (http.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _turn = gate.acquire_owned().await.expect("the gate stays open");
            pair_of(&http, &d, &proxied, &direct).await
        }));
    }
    let mut report = Report::default();
    for t in tasks {
        let (proxied, direct) = t.await?;
        match (proxied, direct) {
            (End::Ok { first_byte, total }, Some(End::Ok { first_byte: f0, total: t0 })) => {
                report.ok += 1;
                report.added_first_byte.push(ms(first_byte) - ms(f0));
                report.added_total.push(ms(total) - ms(t0));
                report.direct_total.push(ms(t0));
            }
            (End::Ok { .. }, Some(other)) => {
                report.ok += 1;
                report.direct_failed.push(format!("{other:?}"));
            }
            (End::Ok { .. }, None) => report.ok += 1,
            (End::Cancelled, _) => report.cancelled += 1,
            (End::Error(status, text), _) => report.errors.push(format!("{status} {text}")),
            (End::Broken(why), _) => report.broken.push(why),
            (End::Hung, _) => report.hung += 1,
        }
    }
    settle(&mut report, engines, cluster).await;
    Ok(report)
}

/// Sends `d` through infera and, unless it is one the client hangs up on, directly too, in an
/// order that alternates with its index (so neither route always goes first on a warm cache).
async fn pair_of(
    http: &client::HttpClient,
    d: &Drawn,
    proxied: &Route,
    direct: &Route,
) -> (End, Option<End>) {
    if d.cancel_after.is_some() {
        return (send(http, proxied, d, TIMEOUT).await, None);
    }
    if d.index.is_multiple_of(2) {
        let through = send(http, proxied, d, TIMEOUT).await;
        (through, Some(send(http, direct, d, TIMEOUT).await))
    } else {
        let straight = send(http, direct, d, TIMEOUT).await;
        (send(http, proxied, d, TIMEOUT).await, Some(straight))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Waits (bounded) until the ledger, the reservations and the engines are back to zero, and
/// records what they hold then.
async fn settle(report: &mut Report, engines: &Engines, cluster: &Cluster) {
    let control = &cluster.control;
    let _ = infera_testkit::poll(SETTLE, "the ledger and the engines to return to zero", async || {
        let mut busy = 0;
        for e in [&engines.prefill, &engines.decode, &engines.mixed] {
            busy += e.in_flight().await.unwrap_or(u64::MAX / 4);
        }
        let targets = control.targets().await;
        let drift: i64 = targets.iter().map(|t| t.drift_requests.abs()).sum();
        (busy == 0 && control.ledger().await.held_requests == 0 && drift == 0).then_some(())
    })
    .await;
    let targets = control.targets().await;
    report.held_after = targets.iter().map(|t| t.held_requests).sum();
    report.drift_after = targets.iter().map(|t| t.drift_requests.abs()).sum();
    let listed = control.admin().await.list_reservations(pb::ListReservationsRequest::default()).await;
    report.reservations_after = listed.map_or(usize::MAX, |r| r.into_inner().reservations.len());
    for e in [&engines.prefill, &engines.decode, &engines.mixed] {
        report.engines_after += e.in_flight().await.unwrap_or(u64::MAX / 4);
    }
}

/// Over runs: each figure's lowest, median and highest run.
fn summary(runs: &[Report]) {
    let med = |v: &[f64]| percentile(v, 50.0).unwrap_or(f64::NAN);
    let spread = |f: &dyn Fn(&Report) -> f64| {
        let v: Vec<f64> = runs.iter().map(f).collect();
        format!(
            "{:+.1} ({:+.1} … {:+.1})",
            med(&v),
            percentile(&v, 0.0).unwrap(),
            percentile(&v, 100.0).unwrap()
        )
    };
    println!("over {} runs, median (lowest … highest run):", runs.len());
    println!("  added first byte, median of pairs: {} ms", spread(&|r| med(&r.added_first_byte)));
    println!(
        "  added first byte, p90 of pairs:    {} ms",
        spread(&|r| percentile(&r.added_first_byte, 90.0).unwrap_or(f64::NAN))
    );
    println!("  added end, median of pairs:        {} ms", spread(&|r| med(&r.added_total)));
    println!("  direct end, median:                {} ms", spread(&|r| med(&r.direct_total)));
    let clean = runs.iter().filter(|r| r.clean()).count();
    println!("  runs with no error and everything back to zero: {clean} of {}", runs.len());
}

//! `infera-launch up`: the deployment's workers on this node (all of them, or `--only-host`'s),
//! in order — workers (each supervised: health, registration, restarts), then `infera-control`
//! (following etcd, or reading the static workers file written here), then the proxies (not
//! with `--no-router`) — and, on SIGTERM/SIGINT, the reverse: proxies, control, every worker
//! deregistered and stopped.
//!
//! stdout carries one line per fact a script may wait for (`infera-launch started NAME
//! pid=PID`, `infera-launch healthy NAME`, `infera-launch ready proxies=URL[,URL] control=URL`
//! or, with `--no-router`, `infera-launch ready workers=NAME[,NAME]`, `infera-launch stopped`);
//! stderr carries the progress and every child's output, prefixed `[NAME]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::child::{Child, field};
use crate::deployment::Engine;
use crate::plan::Plan;
use crate::records::{worker_records, workers_file};
use crate::router::RouterPlan;
use crate::supervise::{Event, Policy, WorkerSpec, supervise};

/// How long control and each proxy may take to print their listening line.
const ROUTER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// SIGTERM → SIGKILL grace for control and proxies.
const ROUTER_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything `up` needs, checked.
#[derive(Debug)]
pub struct UpConfig {
    /// The launcher's logs (and traces).
    pub telemetry: infera_runtime::telemetry::TelemetryConfig,
    /// The workers to run, with their command lines.
    pub plan: Plan,
    /// What runs them.
    pub engine: Engine,
    /// Control flags and proxies; `None` with `--no-router`.
    pub router: Option<RouterPlan>,
    /// etcd (endpoints and the registrar's TLS and credentials); `None` = static workers file.
    pub etcd: Option<infera_registry::EtcdConfig>,
    /// Where the static workers file goes (`None`: a temporary directory).
    pub state_dir: Option<PathBuf>,
    /// Where `infera-sim`, `infera-control`, `infera-proxy` are.
    pub bin_dir: PathBuf,
    /// Failure handling.
    pub policy: Policy,
    /// What the operator should know before the start (the SGLang version, the host selection).
    pub notes: Vec<String>,
}

struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// A control or proxy process, watched by a task until it exits or is told to stop.
struct RouterChild {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Control and the proxies, in start order, and where their unexpected exits are reported.
struct Router {
    children: Vec<RouterChild>,
    exits: mpsc::UnboundedSender<String>,
}

/// Why `up` stops.
enum Reason {
    Signal(&'static str),
    Failed(anyhow::Error),
}

/// Runs the deployment until a signal (Ok) or a failure that ends it (Err, after a clean stop).
pub async fn run(config: UpConfig) -> anyhow::Result<()> {
    let mut signals = Signals::install().context("cannot install the SIGTERM/SIGINT handlers")?;
    let bin = |name: &str| -> anyhow::Result<PathBuf> {
        let path = config.bin_dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            bail!(
                "{} not found (--bin-dir {}; build it with `cargo build -p {name}`)",
                path.display(),
                config.bin_dir.display()
            )
        }
    };
    for note in &config.notes {
        eprintln!("infera-launch: {note}");
    }
    let router_bins = match &config.router {
        Some(_) => Some((bin("infera-control")?, bin("infera-proxy")?)),
        None => None,
    };
    let engine_bin = match config.engine {
        Engine::Sim => Some(bin("infera-sim")?),
        Engine::Sglang => None,
    };
    let records = worker_records(&config.plan);
    let mut _temp_dir = None;
    let registry_args = if let Some(etcd) = &config.etcd {
        let endpoints = etcd.endpoints().join(",");
        infera_registry::reach(etcd)
            .await
            .with_context(|| format!("the registrar cannot use etcd at {endpoints}"))?;
        eprintln!("infera-launch: registry: etcd at {endpoints}");
        let control = config.router.as_ref().map(|r| r.control_etcd(&etcd.security())).unwrap_or_default();
        [vec!["--etcd".to_owned(), endpoints], control.flags()].concat()
    } else {
        let dir = match &config.state_dir {
            Some(d) => d.clone(),
            None => {
                let t = tempfile::Builder::new().prefix("infera-launch-").tempdir()?;
                let path = t.path().to_owned();
                _temp_dir = Some(t);
                path
            }
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create --state-dir {}", dir.display()))?;
        let path = dir.join("workers.toml");
        std::fs::write(&path, workers_file(&records))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("infera-launch: static registry: {} ({} workers)", path.display(), records.len());
        vec!["--workers".to_owned(), path.display().to_string()]
    };

    // Workers.
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (stop_workers, workers_stopped) = watch::channel(false);
    let mut workers = Vec::new();
    // With the router here, its proxies let their streams finish before the workers stop, and
    // control is gone by then: nothing is left to drain.
    let policy = if config.router.is_some() {
        Policy { drain_timeout: Duration::ZERO, ..config.policy }
    } else {
        config.policy
    };
    for (w, record) in config.plan.workers.iter().zip(records) {
        let (program, args) = match &engine_bin {
            Some(sim) => (sim.clone(), w.argv()[1..].to_vec()),
            None => (PathBuf::from(&w.program[0]), w.argv()[1..].to_vec()),
        };
        let spec = WorkerSpec { name: w.name.clone(), program, args, env: w.env.clone(), record };
        let task = supervise(spec, policy, config.etcd.clone(), events_tx.clone(), workers_stopped.clone());
        workers.push(tokio::spawn(task));
    }
    drop(events_tx);
    let (exits_tx, mut exits) = mpsc::unbounded_channel();
    let mut router = Router { children: Vec::new(), exits: exits_tx };
    let bins = router_bins.as_ref().map(|(c, p)| (c.as_path(), p.as_path()));
    let reason = match start(&config, &mut signals, &mut events, bins, registry_args, &mut router).await {
        Err(reason) => reason,
        Ok(()) => serve(&mut signals, &mut events, &mut exits).await,
    };

    // Stop, in reverse: proxies (started last), control, workers (deregistered first).
    match &reason {
        Reason::Signal(s) => eprintln!("infera-launch: {s}: stopping"),
        Reason::Failed(e) => eprintln!("infera-launch: stopping: {e:#}"),
    }
    for child in router.children.into_iter().rev() {
        let _ = child.stop.send(true);
        let _ = child.task.await;
    }
    let _ = stop_workers.send(true);
    for task in workers {
        let _ = task.await;
    }
    println!("infera-launch stopped");
    match reason {
        Reason::Signal(_) => Ok(()),
        Reason::Failed(e) => Err(e),
    }
}

/// Waits for every worker's first health, then starts control and the proxies (`bins`, unless
/// `--no-router`).
async fn start(
    config: &UpConfig,
    signals: &mut Signals,
    events: &mut mpsc::UnboundedReceiver<Event>,
    bins: Option<(&Path, &Path)>,
    registry_args: Vec<String>,
    router: &mut Router,
) -> Result<(), Reason> {
    let total = config.plan.workers.len();
    let mut healthy = std::collections::BTreeSet::new();
    eprintln!("infera-launch: starting {total} workers");
    while healthy.len() < total {
        tokio::select! {
            s = signals.recv() => return Err(Reason::Signal(s)),
            e = events.recv() => match e {
                Some(Event::Started { name, pid }) => println!("infera-launch started {name} pid={pid}"),
                Some(Event::Healthy { name }) => {
                    println!("infera-launch healthy {name}");
                    healthy.insert(name);
                    eprintln!("infera-launch: {} of {total} workers healthy", healthy.len());
                }
                Some(Event::GaveUp { name, reason }) => {
                    return Err(Reason::Failed(anyhow!("worker {name} did not start: {reason}")));
                }
                Some(Event::Retired { name }) => println!("infera-launch retired {name}"),
                None => return Err(Reason::Failed(anyhow!("every worker supervisor ended"))),
            },
        }
    }

    let (Some(plan), Some((control_bin, proxy_bin))) = (&config.router, bins) else {
        let names: Vec<&str> = config.plan.workers.iter().map(|w| w.name.as_str()).collect();
        println!("infera-launch ready workers={}", names.join(","));
        eprintln!("infera-launch: ready: workers registered; no router on this node (--no-router)");
        return Ok(());
    };
    let mut control_args = plan.control_args.clone();
    control_args.extend(registry_args);
    let line = spawn_router("control", control_bin, control_args, signals, router).await?;
    let grpc =
        field(&line, "grpc").ok_or_else(|| Reason::Failed(anyhow!("control's line has no grpc=: {line}")))?;
    let scheme = |tls: bool| if tls { "https" } else { "http" };
    let control_url = format!("{}://{}", scheme(plan.control_tls), loopback(grpc));
    let mut proxies = Vec::new();
    for (i, listen) in plan.proxies.iter().enumerate() {
        let mut args =
            vec!["--listen".to_owned(), listen.clone(), "--control".to_owned(), control_url.clone()];
        args.extend(plan.proxy_args.iter().cloned());
        let line = spawn_router(&format!("proxy-{i}"), proxy_bin, args, signals, router).await?;
        let http = field(&line, "http")
            .ok_or_else(|| Reason::Failed(anyhow!("proxy's line has no http=: {line}")))?;
        proxies.push(format!("{}://{}", scheme(plan.proxy_tls), loopback(http)));
    }
    println!("infera-launch ready proxies={} control={control_url}", proxies.join(","));
    eprintln!("infera-launch: ready: send requests to {}/v1/chat/completions", proxies[0]);
    Ok(())
}

/// Starts control or a proxy and waits (bounded) for its listening line.
async fn spawn_router(
    name: &str,
    program: &Path,
    args: Vec<String>,
    signals: &mut Signals,
    router: &mut Router,
) -> Result<String, Reason> {
    eprintln!("infera-launch: {name}: starting: {} {}", program.display(), args.join(" "));
    let mut child = Child::spawn(name, program, &args, &BTreeMap::new())
        .map_err(|e| Reason::Failed(anyhow!("cannot start {}: {e}", program.display())))?;
    println!("infera-launch started {name} pid={}", child.pid());
    let line = tokio::select! {
        s = signals.recv() => Err(Reason::Signal(s)),
        l = tokio::time::timeout(ROUTER_START_TIMEOUT, child.listening()) => match l {
            Ok(Some(line)) => Ok(line),
            Ok(None) => {
                let status = child.wait().await.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                let tail = child.stderr_tail().join("\n    ");
                Err(Reason::Failed(anyhow!("{name} exited before listening ({status}); last stderr lines:\n    {tail}")))
            }
            Err(_) => Err(Reason::Failed(anyhow!("{name} printed no listening line in {ROUTER_START_TIMEOUT:?}"))),
        },
    };
    let line = match line {
        Ok(line) => line,
        Err(reason) => {
            let _ = child.stop(ROUTER_STOP_TIMEOUT).await;
            return Err(reason);
        }
    };
    eprintln!("infera-launch: {name}: {line}");
    let (stop, mut stopped) = watch::channel(false);
    let owned = name.to_owned();
    let exits = router.exits.clone();
    let task = tokio::spawn(async move {
        tokio::select! {
            status = child.wait() => {
                let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                let tail = child.stderr_tail().join("\n    ");
                let _ = exits.send(format!("{owned} exited unexpectedly ({status}); last stderr lines:\n    {tail}"));
            }
            () = async { let _ = stopped.wait_for(|s| *s).await; } => {
                match child.stop(ROUTER_STOP_TIMEOUT).await {
                    Ok(status) => eprintln!("infera-launch: {owned}: stopped ({status})"),
                    Err(e) => eprintln!("infera-launch: {owned}: stop: {e}"),
                }
            }
        }
    });
    router.children.push(RouterChild { stop, task });
    Ok(line)
}

/// Runs until a signal, a worker giving up (reported; the others keep serving), or control or
/// a proxy exiting (which ends `up`).
async fn serve(
    signals: &mut Signals,
    events: &mut mpsc::UnboundedReceiver<Event>,
    exits: &mut mpsc::UnboundedReceiver<String>,
) -> Reason {
    loop {
        tokio::select! {
            s = signals.recv() => return Reason::Signal(s),
            Some(exit) = exits.recv() => return Reason::Failed(anyhow!(exit)),
            Some(e) = events.recv() => match e {
                Event::Started { name, pid } => println!("infera-launch started {name} pid={pid}"),
                Event::Healthy { name } => println!("infera-launch healthy {name}"),
                Event::Retired { name } => println!("infera-launch retired {name}"),
                Event::GaveUp { name, reason } => {
                    println!("infera-launch failed {name}");
                    eprintln!("infera-launch: {name} is down for good: {reason}");
                }
            },
        }
    }
}

/// A wildcard listen address is reached on loopback.
fn loopback(addr: &str) -> String {
    addr.replace("0.0.0.0:", "127.0.0.1:").replace("[::]:", "[::1]:")
}

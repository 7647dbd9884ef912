//! One worker, kept running: spawn, wait for `/health` with a deadline, register (etcd, under
//! a lease), and on a failure (spawn error, exit, health deadline) report why — exit status
//! and the last lines of stderr — deregister and restart per the policy, with a bounded
//! backoff and a bounded number of restarts. On stop: drain (control takes the worker out of new
//! picks and reports what it still holds; manual/operations/rollouts.md), deregister, then stop
//! the child. The same when an operator asks for it (`Admin/DrainTarget` with
//! `stop_when_drained`, a stop request in etcd), after which the worker stays stopped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use infera_proto::types::{WorkerId, WorkerRecord};
use infera_registry::drain::Drained;
use infera_registry::register::DEFAULT_TTL;
use infera_registry::{EtcdConfig, Registration};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::child::Child;
use crate::health::wait_healthy;
use crate::records::health_url;

/// When a failed worker is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Restart {
    /// After a failure (exit, health deadline), with backoff, at most `max_restarts` times in a row.
    OnFailure,
    /// Never: a failure stops the worker for good (and fails `up` while starting).
    Never,
}

/// How failures are handled.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// Whether to restart.
    pub restart: Restart,
    /// Restarts in a row before giving up (the count resets after [`Policy::stable_after`] healthy).
    pub max_restarts: u32,
    /// First backoff; doubles per restart in a row.
    pub backoff: Duration,
    /// Backoff ceiling.
    pub max_backoff: Duration,
    /// Healthy this long ⇒ the next failure counts as the first.
    pub stable_after: Duration,
    /// Readiness deadline per start.
    pub health_timeout: Duration,
    /// SIGTERM → SIGKILL grace on stop.
    pub stop_timeout: Duration,
    /// On stop, how long to wait for control to report the worker empty before deregistering
    /// it (zero: no drain). Needs etcd.
    pub drain_timeout: Duration,
}

/// What a worker supervisor reports to `up`.
#[derive(Debug)]
pub enum Event {
    /// A process was started.
    Started {
        /// The worker's name (as in the plan).
        name: String,
        /// The process's id.
        pid: u32,
    },
    /// `/health` answered 200 (and the record is being registered).
    Healthy {
        /// The worker's name (as in the plan).
        name: String,
    },
    /// An operator had the worker drained and stopped (`Admin/DrainTarget` with
    /// `stop_when_drained`); it is not restarted.
    Retired {
        /// The worker's name (as in the plan).
        name: String,
    },
    /// The worker failed and will not be restarted.
    GaveUp {
        /// The worker's name (as in the plan).
        name: String,
        /// The last failure.
        reason: String,
    },
}

/// One worker to run.
#[derive(Debug)]
pub struct WorkerSpec {
    /// Its name in the plan, in logs and events.
    pub name: String,
    /// The executable (`infera-sim` from the bin dir, or the python).
    pub program: PathBuf,
    /// Everything after the program.
    pub args: Vec<String>,
    /// Its environment on top of the launcher's.
    pub env: BTreeMap<String, String>,
    /// What to register.
    pub record: WorkerRecord,
}

enum Outcome {
    Stop,
    /// An operator asked for the worker to be drained and stopped.
    Retire,
    Failed(String),
    ExitedCleanly,
}

/// Runs `spec` until `stop` turns true or the policy gives up. `etcd` `None`: nothing to
/// register (control reads the static workers file).
pub async fn supervise(
    spec: WorkerSpec,
    policy: Policy,
    etcd: Option<EtcdConfig>,
    events: mpsc::UnboundedSender<Event>,
    mut stop: watch::Receiver<bool>,
) {
    let name = spec.name.clone();
    let say = |msg: String| eprintln!("infera-launch: {name}: {msg}");
    let mut in_a_row = 0u32;
    loop {
        if *stop.borrow() {
            return;
        }
        say(format!("starting: {} {}", spec.program.display(), spec.args.join(" ")));
        let started = Instant::now();
        let mut healthy_since = None;
        let outcome = match Child::spawn(&name, &spec.program, &spec.args, &spec.env) {
            Err(e) => {
                let reason = format!("cannot start {}: {e}", spec.program.display());
                say(reason.clone());
                let _ = events.send(Event::GaveUp { name: name.clone(), reason });
                return;
            }
            Ok(mut child) => {
                let _ = events.send(Event::Started { name: name.clone(), pid: child.pid() });
                let outcome = run_once(
                    &spec,
                    &policy,
                    etcd.as_ref(),
                    &mut child,
                    &mut stop,
                    &events,
                    &mut healthy_since,
                )
                .await;
                if let Outcome::Failed(_) = &outcome {
                    let _ = child.stop(policy.stop_timeout).await;
                }
                if let Outcome::Stop | Outcome::Retire = &outcome {
                    match child.stop(policy.stop_timeout).await {
                        Ok(status) => say(format!("stopped ({status})")),
                        Err(e) => say(format!("stop: {e}")),
                    }
                }
                outcome
            }
        };
        let reason = match outcome {
            Outcome::Stop => return,
            Outcome::Retire => {
                if let Some(etcd) = &etcd
                    && let Err(e) = infera_registry::retire::clear(etcd, &spec.record.id).await
                {
                    say(format!("cannot delete its stop request from etcd: {e}"));
                }
                say("retired: stopped as asked; not restarted".to_owned());
                let _ = events.send(Event::Retired { name: name.clone() });
                return;
            }
            Outcome::ExitedCleanly => {
                say("exited with status 0; not restarted".to_owned());
                let _ =
                    events.send(Event::GaveUp { name: name.clone(), reason: "exited with status 0".into() });
                return;
            }
            Outcome::Failed(reason) => reason,
        };
        say(format!("failed after {:?}: {reason}", started.elapsed()));
        if healthy_since.is_some_and(|t: Instant| t.elapsed() >= policy.stable_after) {
            in_a_row = 0;
        }
        if policy.restart == Restart::Never || in_a_row >= policy.max_restarts {
            let why = if policy.restart == Restart::Never {
                "--restart never".to_owned()
            } else {
                format!("{in_a_row} restarts in a row")
            };
            say(format!("giving up ({why})"));
            let _ = events.send(Event::GaveUp { name: name.clone(), reason });
            return;
        }
        let backoff = policy.backoff.saturating_mul(1 << in_a_row.min(16)).min(policy.max_backoff);
        in_a_row += 1;
        say(format!("restarting in {backoff:?} (restart {in_a_row} of at most {})", policy.max_restarts));
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// One start of the worker: health, registration, then running until exit or stop.
async fn run_once(
    spec: &WorkerSpec,
    policy: &Policy,
    etcd: Option<&EtcdConfig>,
    child: &mut Child,
    stop: &mut watch::Receiver<bool>,
    events: &mpsc::UnboundedSender<Event>,
    healthy_since: &mut Option<Instant>,
) -> Outcome {
    let name = &spec.name;
    let url = health_url(&spec.record);
    let deadline = Instant::now() + policy.health_timeout;
    let pid = child.pid();
    eprintln!("infera-launch: {name}: pid {pid}; waiting for {url} (deadline {:?})", policy.health_timeout);
    let early = tokio::select! {
        r = wait_healthy(&url, deadline) => r.err().map(|e| Outcome::Failed(e.to_string())),
        status = child.wait() => Some(exited(child, status, "before it was healthy")),
        _ = stop.wait_for(|s| *s) => Some(Outcome::Stop),
    };
    if let Some(outcome) = early {
        return outcome;
    }
    *healthy_since = Some(Instant::now());
    eprintln!("infera-launch: {name}: healthy at {}", spec.record.url);
    if let Some(etcd) = etcd
        && let Err(e) = infera_registry::retire::clear(etcd, &spec.record.id).await
    {
        eprintln!("infera-launch: {name}: cannot clear an earlier stop request in etcd: {e}");
    }
    let registration = etcd.map(|etcd| {
        eprintln!("infera-launch: {name}: registering in etcd ({})", etcd.endpoints().join(","));
        Registration::start(etcd, spec.record.clone(), DEFAULT_TTL)
    });
    let _ = events.send(Event::Healthy { name: name.clone() });
    let asked = async {
        match etcd {
            Some(etcd) => infera_registry::retire::wait_asked(etcd, &spec.record.id).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        status = child.wait() => exited(child, status, "while serving"),
        _ = stop.wait_for(|s| *s) => Outcome::Stop,
        by = asked => {
            eprintln!("infera-launch: {name}: {by} asked to drain and stop it");
            Outcome::Retire
        }
    };
    if let Some(r) = registration {
        if let (Outcome::Stop | Outcome::Retire, Some(etcd)) = (&outcome, etcd)
            && !policy.drain_timeout.is_zero()
        {
            drain(name, &spec.record.id, &r, etcd, policy.drain_timeout).await;
        }
        r.stop().await;
        eprintln!("infera-launch: {name}: deregistered");
    }
    outcome
}

/// Asks control to drain the worker and waits, at most `timeout`, for its leader to report that
/// the ledger holds nothing on it: the streams in flight end before the worker stops.
async fn drain(name: &str, id: &WorkerId, registration: &Registration, etcd: &EtcdConfig, timeout: Duration) {
    let started = Instant::now();
    let deadline = started + timeout;
    eprintln!(
        "infera-launch: {name}: draining (at most {timeout:?}): no new requests; waiting for those in flight"
    );
    let Ok(Some(since)) = tokio::time::timeout_at(deadline, registration.drain()).await else {
        eprintln!(
            "infera-launch: {name}: the drain request did not reach etcd within {timeout:?}; stopping it as it is"
        );
        return;
    };
    match infera_registry::drain::wait_drained(etcd, id, since, deadline).await {
        Drained::Empty => {
            eprintln!(
                "infera-launch: {name}: drained in {:?}: control holds nothing on it",
                started.elapsed()
            );
        }
        Drained::Deadline { held: Some(held) } => eprintln!(
            "infera-launch: {name}: drain deadline ({timeout:?}) passed with {held} requests still held; \
             stopping it: what the engine does not finish within --stop-timeout-ms is cut"
        ),
        Drained::Deadline { held: None } => eprintln!(
            "infera-launch: {name}: drain deadline ({timeout:?}) passed without a report from control's \
             leader (is a control following this etcd?); stopping it as it is"
        ),
    }
}

fn exited(child: &Child, status: std::io::Result<std::process::ExitStatus>, when: &str) -> Outcome {
    match status {
        Ok(s) if s.success() => Outcome::ExitedCleanly,
        Ok(s) => {
            let tail = child.stderr_tail();
            let tail = if tail.is_empty() {
                String::new()
            } else {
                format!("; last stderr lines:\n    {}", tail.join("\n    "))
            };
            Outcome::Failed(format!("exited {when} ({s}){tail}"))
        }
        Err(e) => Outcome::Failed(format!("cannot wait for it: {e}")),
    }
}

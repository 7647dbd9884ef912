//! The `infera-launch` command line (every flag also an `INFERA_LAUNCH_*` environment variable)
//! → [`Config`], with the deployment file loaded and checked.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use infera_registry::EtcdConfig;

use crate::deployment::Engine;
use crate::error::LaunchError;
use crate::hosts::HostError;
use crate::plan::Plan;
use crate::router::RouterPlan;
use crate::supervise::{Policy, Restart};
use crate::up::UpConfig;

/// infera-launch: deployment file → SGLang workers.
#[derive(Parser, Debug)]
#[command(name = "infera-launch", version, about, long_about = None)]
pub struct Args {
    #[command(subcommand)]
    command: CommandArgs,
}

#[derive(Subcommand, Debug)]
enum CommandArgs {
    /// Print each worker's environment and command line (shell-quoted, copy-pasteable).
    Plan {
        /// The deployment file (TOML).
        #[arg(env = "INFERA_LAUNCH_FILE")]
        file: PathBuf,
    },
    /// Start the workers, control and the proxies; stop them all on SIGTERM/SIGINT.
    Up(Box<UpArgs>),
}

#[derive(clap::Args, Debug)]
struct UpArgs {
    /// The deployment file (TOML).
    #[arg(env = "INFERA_LAUNCH_FILE")]
    file: PathBuf,
    /// etcd endpoints (comma-separated): each healthy worker is registered under a lease and
    /// control follows `/infera/v1/workers/`. Unset: a static workers file in --state-dir.
    #[arg(long, env = "INFERA_LAUNCH_ETCD", value_delimiter = ',')]
    etcd: Vec<String>,
    #[command(flatten)]
    etcd_security: EtcdArgs,
    /// Where the static workers file is written (without --etcd). Unset: a temporary directory.
    #[arg(long, env = "INFERA_LAUNCH_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Milliseconds a worker may take to answer `GET /health` with 200, per start.
    /// Default: 600000 for engine sglang (model loading), 30000 for sim.
    #[arg(long, env = "INFERA_LAUNCH_HEALTH_TIMEOUT_MS")]
    health_timeout_ms: Option<u64>,
    /// Restart a worker that exits or misses its health deadline.
    #[arg(long, env = "INFERA_LAUNCH_RESTART", value_enum, default_value_t = Restart::OnFailure)]
    restart: Restart,
    /// Restarts in a row before giving up on a worker (the count resets after a minute healthy).
    #[arg(long, env = "INFERA_LAUNCH_MAX_RESTARTS", default_value_t = 5)]
    max_restarts: u32,
    /// First restart backoff in milliseconds; doubles per restart in a row, up to 30 s.
    #[arg(long, env = "INFERA_LAUNCH_RESTART_BACKOFF_MS", default_value_t = 1_000)]
    restart_backoff_ms: u64,
    /// Milliseconds a worker has to exit after SIGTERM before SIGKILL.
    #[arg(long, env = "INFERA_LAUNCH_STOP_TIMEOUT_MS", default_value_t = 20_000)]
    stop_timeout_ms: u64,
    /// On stop (SIGTERM, SIGINT), how long each worker is drained first, with --etcd and
    /// --no-router: control takes it out of new picks and reports what its ledger still holds
    /// on it; the worker is deregistered and stopped once that is nothing, or at this deadline
    /// (the streams still on it are cut). 0: no drain. Without --no-router the launcher's own
    /// proxies finish their streams before the workers stop, and nothing is drained.
    #[arg(long, env = "INFERA_LAUNCH_DRAIN_TIMEOUT_MS", default_value_t = 30_000)]
    drain_timeout_ms: u64,
    /// Directory of infera-sim, infera-control and infera-proxy. Unset: the directory of the
    /// infera-launch executable.
    #[arg(long, env = "INFERA_LAUNCH_BIN_DIR")]
    bin_dir: Option<PathBuf>,
    /// Start only the workers whose `host` is HOST (as written in the file; the whole file is
    /// still checked): one `up` per node of a deployment over several nodes. Needs --etcd.
    #[arg(long, env = "INFERA_LAUNCH_ONLY_HOST", value_name = "HOST")]
    only_host: Option<String>,
    /// Start no control and no proxies: this node only runs and registers workers (the router
    /// runs on another node, following the same etcd). Needs --etcd.
    #[arg(long, env = "INFERA_LAUNCH_NO_ROUTER")]
    no_router: bool,
    /// The launcher's own logs (the registrar's and the drain's among them); the workers,
    /// control and the proxies log on their own, and inherit the environment.
    #[command(flatten)]
    telemetry: infera_runtime::telemetry::TelemetryArgs,
}

infera_registry::etcd_security_args!(
    /// How the registrar (and, without `[router.etcd]`, the control `up` starts) reaches a
    /// secured etcd (manual/operations/etcd.md).
    struct EtcdArgs, "INFERA_LAUNCH_ETCD"
);

/// What to do, with a checked deployment.
#[derive(Debug)]
pub struct Config {
    /// The subcommand, with what it needs.
    pub command: Command,
}

/// A subcommand of `infera-launch`.
#[derive(Debug)]
pub enum Command {
    /// Print the plan.
    Plan(Plan),
    /// Run the deployment.
    Up(Box<UpConfig>),
}

impl TryFrom<Args> for Config {
    type Error = LaunchError;

    fn try_from(a: Args) -> Result<Self, LaunchError> {
        let command = match a.command {
            CommandArgs::Plan { file } => Command::Plan(crate::plan_file(&file)?),
            CommandArgs::Up(up) => Command::Up(Box::new(up_config(*up)?)),
        };
        Ok(Self { command })
    }
}

fn up_config(a: UpArgs) -> Result<UpConfig, LaunchError> {
    let (file, text) = crate::deployment::load(&a.file)?;
    let mut plan = crate::check::plan(&file, &text, &a.file)?;
    let endpoints: Vec<String> = a.etcd.into_iter().filter(|e| !e.trim().is_empty()).collect();
    if endpoints.is_empty() {
        for (flag, set) in [("--only-host", a.only_host.is_some()), ("--no-router", a.no_router)] {
            if set {
                return Err(HostError::NeedsEtcd { flag }.into());
            }
        }
    }
    let etcd = EtcdConfig::new(endpoints.clone(), a.etcd_security.security())?;
    etcd.check_files()?;
    let router = (!a.no_router).then(|| RouterPlan::from_section(file.router.as_ref()));
    // Control's own settings, when `up` starts it: checked as control would at its start.
    if let Some(router) = &router
        && router.control_etcd.is_some()
    {
        let control = router.control_etcd(&etcd.security());
        if endpoints.is_empty() {
            let flags = "[router.etcd]".to_owned();
            return Err(infera_registry::EtcdConfigError::NoEndpoints { flags }.into());
        }
        EtcdConfig::new(endpoints.clone(), control)?.check_files()?;
    }
    let etcd = (!endpoints.is_empty()).then_some(etcd);
    let mut notes = vec![format!("deployment {}: {}", a.file.display(), plan.sglang)];
    notes.extend(crate::hosts::select(&mut plan, a.only_host.as_deref(), a.file.clone())?);
    let health_default = match file.engine {
        Engine::Sglang => 600_000,
        Engine::Sim => 30_000,
    };
    let bin_dir = match a.bin_dir {
        Some(d) => d,
        None => std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(ToOwned::to_owned))
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    let telemetry = a.telemetry.into_config("infera-launch")?;
    Ok(UpConfig {
        telemetry,
        plan,
        engine: file.engine,
        router,
        etcd,
        notes,
        state_dir: a.state_dir,
        bin_dir,
        policy: Policy {
            restart: a.restart,
            max_restarts: a.max_restarts,
            backoff: Duration::from_millis(a.restart_backoff_ms),
            max_backoff: Duration::from_secs(30),
            stable_after: Duration::from_secs(60),
            health_timeout: Duration::from_millis(a.health_timeout_ms.unwrap_or(health_default)),
            stop_timeout: Duration::from_millis(a.stop_timeout_ms),
            drain_timeout: Duration::from_millis(a.drain_timeout_ms),
        },
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn verify_cli() {
        Args::command().debug_assert();
    }

    #[test]
    fn every_argument_has_an_env_var() {
        let cmd = Args::command();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments().filter(|a| !["help", "version"].contains(&a.get_id().as_str())) {
                let env = arg.get_env().unwrap_or_else(|| panic!("{} has no env var", arg.get_id()));
                let env = env.to_str().unwrap();
                // The telemetry flags every infera binary shares keep their shared names.
                let shared = ["INFERA_LOG", "INFERA_LOG_FORMAT", "INFERA_OTLP_ENDPOINT"];
                assert!(env.starts_with("INFERA_LAUNCH_") || shared.contains(&env), "{env:?}");
            }
        }
    }
}

//! infera-launcher: one deployment file → per worker, the SGLang command line and environment,
//! ready to exec (`infera-launch plan FILE` prints them).
//!
//! Module map, in the order a file flows through it:
//!
//! - [`config`]: the `infera-launch` command line → [`Config`].
//! - [`deployment`]: the TOML format (unknown keys rejected with their line).
//! - [`detect`]: the SGLang version of an interpreter, for a file that names none.
//! - [`check`]: cross-field rules (GPU and port overlap, PP partition, parallelism, speculative
//!   mirroring, router settings) and the build of the [`Plan`].
//! - [`sglang`]: the typed SGLang arguments, rendered per flag group and per [`version`].
//! - [`plan`]: workers' argv + env and their shell form.
//!
//! And for `infera-launch up`, which runs a plan:
//!
//! - [`hosts`]: which workers this node starts (`--only-host`), and that they belong here.
//! - [`records`]: the worker records (etcd or the static workers file), from the plan.
//! - [`router`]: `[router]` → control's flags and the proxies.
//! - [`up`]: the orchestration — workers, then control and proxies; the reverse on a signal.
//! - [`supervise`]: one worker kept running (health, registration, restarts).
//! - [`health`]: `GET /health` polled with a deadline.
//! - [`child`]: one child process (output forwarding, stderr tail, bounded stop).

pub mod check;
pub mod child;
pub mod config;
pub mod deployment;
pub mod detect;
pub mod error;
pub mod health;
pub mod hosts;
pub mod plan;
pub mod records;
pub mod router;
pub mod sglang;
pub mod supervise;
pub mod up;
pub mod version;

use std::path::Path;

pub use config::{Args, Command, Config};
pub use error::LaunchError;
pub use plan::{Plan, WorkerPlan};

/// Reads, checks and plans a deployment file.
pub fn plan_file(path: &Path) -> Result<Plan, LaunchError> {
    let (file, text) = deployment::load(path)?;
    Ok(check::plan(&file, &text, path)?)
}

/// Parses, checks and plans deployment text (`path` only names it in errors).
pub fn plan_text(path: &Path, text: &str) -> Result<Plan, LaunchError> {
    let file = deployment::parse(path, text)?;
    Ok(check::plan(&file, text, path)?)
}

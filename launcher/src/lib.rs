//! infera-launcher: one deployment file → per worker, the SGLang command line and environment,
//! ready to exec (`infera-launch plan FILE` prints them).
//!
//! Module map, in the order a file flows through it:
//!
//! - [`config`]: the `infera-launch` command line → [`Config`].
//! - [`deployment`]: the TOML format (unknown keys rejected with their line).
//! - [`check`]: cross-field rules (GPU and port overlap, PP partition, parallelism, speculative
//!   mirroring, router settings) and the build of the [`Plan`].
//! - [`sglang`]: the typed SGLang arguments, rendered per flag group and per [`version`].
//! - [`plan`]: workers' argv + env and their shell form.

pub mod check;
pub mod config;
pub mod deployment;
pub mod error;
pub mod plan;
pub mod sglang;
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

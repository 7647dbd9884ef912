//! A deployment without `sglang_version`: engine `sglang` asks the configured interpreter
//! (the real SGLang venvs of `cargo xtask setup`, found like tests/conformance.rs finds them)
//! and spells the command lines for what it has; an interpreter without SGLang is an error
//! naming the key; engine `sim` takes the newest supported release and says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use infera_launcher::plan::{Resolved, VersionSource};
use infera_launcher::version::SglangVersion;
use infera_launcher::{LaunchError, Plan, plan_text};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The venv Python holding SGLang `version` (`INFERA_SGLANG_<X_Y_Z>_PYTHON`, else the venv
/// `cargo xtask setup` made).
fn python(version: &str) -> PathBuf {
    infera_kv::testing::sglang_python(version)
}

/// A mixed worker with a decode CUDA-graph cap (spelled per version), no `sglang_version`.
fn without_version(python_line: &str) -> String {
    format!(
        "engine = \"sglang\"\n{python_line}[model]\npath = \"m\"\n[mixed]\ncuda_graph_max_bs = 16\n\
         [[mixed.workers]]\nname = \"w\"\ngpus = [0]\nport = 30000\n"
    )
}

/// Writes an executable script.
fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Runs `f` again while its outcome says "Text file busy": a script written just now cannot be
/// executed while a process another test thread forks meanwhile still holds its write handle.
fn unless_busy<T: std::fmt::Debug>(f: impl Fn() -> T) -> T {
    for _ in 0..50 {
        let out = f();
        if !format!("{out:?}").contains("Text file busy") {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    f()
}

fn plan_with(python: &Path) -> Result<Plan, LaunchError> {
    plan_text(
        Path::new("d.toml"),
        &without_version(&format!("python = {:?}\n", python.display().to_string())),
    )
}

#[test]
fn each_venvs_version_decides_the_spelling() {
    for (version, graph_flag) in [("0.5.18", "--cuda-graph-max-bs"), ("0.5.23", "--cuda-graph-max-bs-decode")]
    {
        let python = python(version);
        let plan = plan_with(&python).unwrap_or_else(|e| panic!("{version}: {e}"));
        let python_str = python.display().to_string();
        assert_eq!(
            plan.sglang,
            Resolved {
                version: version.parse().unwrap(),
                source: VersionSource::Detected { python: python_str.clone() }
            }
        );
        let argv = plan.workers[0].argv();
        assert_eq!(argv[..3], [python_str.as_str(), "-m", "sglang.launch_server"]);
        let at = argv.iter().position(|a| a.starts_with("--cuda-graph-max-bs")).unwrap();
        assert_eq!(argv[at..at + 2], [graph_flag, "16"], "{version}");
        assert_eq!(plan.workers[0].args.version.to_string(), version);
        let first = plan.render().lines().next().unwrap().to_owned();
        assert_eq!(first, format!("# SGLang {version} (detected from {python_str})"));
    }
}

#[test]
fn an_interpreter_without_sglang_is_an_error_naming_the_python_key() {
    let e = plan_with(Path::new("/usr/bin/python3")).unwrap_err().to_string();
    assert!(
        e.contains(
            "d.toml:2: python: sglang_version is not set and cannot be detected: `/usr/bin/python3 -c 'import \
             importlib.metadata as m; print(m.version(\"sglang\"))'` failed (exit status: 1): \
             importlib.metadata.PackageNotFoundError: No package metadata was found for sglang; set \
             sglang_version, or python to the interpreter that has SGLang installed"
        ),
        "{e}"
    );
    let e = plan_with(Path::new("/nonexistent/python")).unwrap_err().to_string();
    assert!(e.contains("d.toml:2: python: sglang_version is not set and cannot be detected: cannot run /nonexistent/python: "), "{e}");
}

#[test]
fn plan_detects_through_the_default_python_on_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.toml");
    std::fs::write(&file, without_version("")).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let shim = bin.join("python3");
    let plan = |target: &Path| {
        // `python3` on PATH is a shim for `target` (a venv's python must be run by its own path).
        write_script(&shim, &format!("#!/bin/sh\nexec '{}' \"$@\"\n", target.display()));
        unless_busy(|| {
            Command::new(env!("CARGO_BIN_EXE_infera-launch"))
                .arg("plan")
                .arg(&file)
                .env("PATH", &bin)
                .output()
                .unwrap()
        })
    };
    let out = plan(&python("0.5.23"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("# SGLang 0.5.23 (detected from python3)\n"), "{text}");
    assert!(
        text.contains("  python3 -m sglang.launch_server \\\n")
            && text.contains("--cuda-graph-max-bs-decode 16"),
        "{text}"
    );
    // The default interpreter without SGLang: the unset key is at fault (line 0: not in the file).
    let out = plan(Path::new("/usr/bin/python3"));
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!(
            "{}:0: sglang_version: sglang_version is not set and cannot be detected: `python3 -c",
            file.display()
        )),
        "{err}"
    );
    assert!(err.contains("No package metadata was found for sglang"), "{err}");
}

#[test]
fn the_sim_without_a_version_emulates_the_newest_and_says_so() {
    let text = std::fs::read_to_string(root().join("examples/sim_1p1d/deployment.toml")).unwrap();
    let text = text.replace("sglang_version = \"0.5.23\"\n", "");
    let plan = plan_text(Path::new("sim.toml"), &text).unwrap();
    assert_eq!(plan.sglang, Resolved { version: SglangVersion::NEWEST, source: VersionSource::SimDefault });
    assert_eq!(plan.workers[1].env["INFERA_SIM_SGLANG_VERSION"], SglangVersion::NEWEST.to_string());
    assert!(plan.render().starts_with(&format!(
        "# SGLang {} (sglang_version unset: engine sim emulates the newest supported release)\n",
        SglangVersion::NEWEST
    )));
}

#[test]
fn a_file_version_is_used_as_it_is() {
    let text = without_version("sglang_version = \"0.5.18\"\npython = \"/nonexistent/python\"\n");
    let plan = plan_text(Path::new("d.toml"), &text).unwrap();
    assert_eq!(plan.sglang, Resolved { version: SglangVersion::OLDEST, source: VersionSource::File });
}

#[test]
fn a_detected_version_outside_the_checked_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let python = dir.path().join("python");
    write_script(&python, "#!/bin/sh\necho 0.5.12\n");
    let e = unless_busy(|| plan_with(&python).unwrap_err().to_string());
    assert!(
        e.contains(&format!(
            "d.toml:2: python: {} has SGLang 0.5.12 installed, which is not supported",
            python.display()
        )),
        "{e}"
    );
}

//! `deploy/docker/sglang-patches/`: the patch set the `sglang` image target applies
//! (`deploy/docker/Dockerfile` runs its `apply.py`). For every SGLang release this machine
//! has — the 0.5.18 and 0.5.23 parser venvs' installed packages, the CPU engine venv's, and the
//! wheels `cargo xtask setup` keeps in `.venv-sglang-wheels` (0.5.22) — the files the patches
//! touch are copied to a temporary folder laid out as the `sglang` package, and the same
//! `apply.py` runs on them:
//!
//! - a patch whose ledger range holds the release applies cleanly, every line it adds is in
//!   the result, the result compiles (`python -m py_compile`), and the patch-specific check
//!   holds (below) — which fails on the unpatched file (the range is not wider than the bug)
//!   and passes on a release the ledger skips (the range leaves out no release with the bug);
//! - run again, it reports the patch already applied and changes nothing;
//! - a release below `min_version`, above `max_version`, or at a `fixed_in` reports the patch
//!   skipped and changes nothing;
//! - a file whose lines do not match fails the run (exit 1) and is left as it was;
//! - and in behaviour, on the real SGLang with torch (the CPU engine venv):
//!   `sglang_pp_stage.py` builds the model's pipeline stages from the installed and the patched
//!   file as MI355X's aiter path would (`the_patched_model_builds_every_pipeline_stage`).
//!
//! The Python is the deploy venv's (`INFERA_DEPLOY_VENV`, else `.venv-deploy`); GNU `patch`
//! is on `PATH` (Debian's, as in the images).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    infera_deploy::dir().join("..")
}

fn patches_dir() -> PathBuf {
    infera_deploy::dir().join("docker/sglang-patches")
}

fn python() -> PathBuf {
    infera_deploy::venv().join("bin/python")
}

/// Runs `cmd`, returning (exit code, stdout + stderr).
fn run(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The ledger as JSON (read by Python's tomllib, as apply.py reads it).
fn ledger(path: &Path) -> Vec<Value> {
    let (code, out) = run(Command::new(python())
        .args(["-c", "import json, sys, tomllib; print(json.dumps(tomllib.load(open(sys.argv[1], 'rb'))))"])
        .arg(path));
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["patch"].as_array().cloned().unwrap_or_default()
}

/// (major, minor, patch) of "X.Y.Z[suffix]".
fn release(v: &str) -> (u32, u32, u32) {
    let mut it = v.split('.').map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>());
    let mut next = || it.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next(), next())
}

/// What the ledger says must happen to `entry` on `version`: applied or skipped.
fn expected(entry: &Value, version: &str) -> &'static str {
    let v = release(version);
    let fixed = entry["fixed_in"].as_str().unwrap_or("");
    let in_range = v >= release(entry["min_version"].as_str().unwrap())
        && v <= release(entry["max_version"].as_str().unwrap());
    if (!fixed.is_empty() && v >= release(fixed)) || !in_range { "skipped" } else { "applied" }
}

/// The files a -p1 patch writes (its `+++ b/…` lines) and the lines it adds.
fn patch_targets(patch: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(patch).unwrap();
    let files = text
        .lines()
        .filter_map(|l| l.strip_prefix("+++ b/"))
        .map(|f| f.split('\t').next().unwrap().to_owned())
        .collect();
    let added = text
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .map(|l| l[1..].to_owned())
        .collect();
    (files, added)
}

/// One SGLang release's package: where it is and its version.
struct Source {
    what: String,
    version: String,
    /// The `sglang` package directory, or a wheel (the files are taken out of the zip).
    place: Place,
}

enum Place {
    Dir(PathBuf),
    Wheel(PathBuf),
}

/// The version of the `sglang-X.dist-info` next to the package.
fn dist_version(site_packages: &Path) -> Option<String> {
    std::fs::read_dir(site_packages).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.strip_prefix("sglang-")?.strip_suffix(".dist-info").map(str::to_owned)
    })
}

/// `<venv>/lib/python3*/site-packages`.
fn site_packages(venv: &Path) -> Option<PathBuf> {
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.join("sglang").is_dir())
}

fn sources() -> Vec<Source> {
    let mut out = Vec::new();
    // The parser venvs (`INFERA_SGLANG_0_5_18_PYTHON` …, set by `cargo xtask test`).
    for version in ["0.5.18", "0.5.23"] {
        let var = format!("INFERA_SGLANG_{}_PYTHON", version.replace('.', "_"));
        let venv = std::env::var_os(&var).map_or_else(
            || root().join(format!(".venv-sglang-{version}")),
            |p| PathBuf::from(p).parent().and_then(Path::parent).unwrap().to_owned(),
        );
        let site = site_packages(&venv)
            .unwrap_or_else(|| panic!("no sglang in {}: run `cargo xtask setup`", venv.display()));
        let found = dist_version(&site).unwrap();
        assert_eq!(found, version, "{}", site.display());
        out.push(Source {
            what: venv.display().to_string(),
            version: found,
            place: Place::Dir(site.join("sglang")),
        });
    }
    // The CPU engine venv, when set up (another install of a release; its files may differ).
    let engine = root().join(".venv-sglang-engine");
    if let Some(site) = site_packages(&engine)
        && let Some(version) = dist_version(&site)
    {
        out.push(Source {
            what: engine.display().to_string(),
            version,
            place: Place::Dir(site.join("sglang")),
        });
    }
    // The wheels only downloaded (`INFERA_SGLANG_WHEELS`: under `cargo xtask test` they must be
    // there; without it, `.venv-sglang-wheels` when present).
    let required = std::env::var_os("INFERA_SGLANG_WHEELS");
    let dir = required.clone().map_or_else(|| root().join(".venv-sglang-wheels"), PathBuf::from);
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "whl")).collect()
        })
        .unwrap_or_default();
    wheels.sort();
    if required.is_some() {
        assert!(!wheels.is_empty(), "no SGLang wheel in {}: run `cargo xtask setup`", dir.display());
    }
    for wheel in wheels {
        let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
        let version = name.split('-').nth(1).unwrap().to_owned();
        out.push(Source { what: wheel.display().to_string(), version, place: Place::Wheel(wheel) });
    }
    out
}

/// Copies `files` (paths inside the package) of `source` to `dest`, laid out as the package.
fn copy_files(source: &Source, files: &[String], dest: &Path) {
    for f in files {
        let to = dest.join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        match &source.place {
            Place::Dir(dir) => {
                std::fs::copy(dir.join(f), &to).unwrap_or_else(|e| panic!("{}: {f}: {e}", source.what));
            }
            Place::Wheel(wheel) => {
                let (code, out) = run(Command::new(python())
                    .args(["-c", "import sys, zipfile; open(sys.argv[3], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('sglang/' + sys.argv[2]))"])
                    .arg(wheel)
                    .arg(f)
                    .arg(&to));
                assert_eq!(code, 0, "{}: {f}: {out}", source.what);
            }
        }
    }
}

/// `apply.py` on the package copy at `dir` as release `version`: exit code, output, report.
fn apply(dir: &Path, version: &str, ledger: &Path) -> (i32, String, BTreeMap<String, (String, String)>) {
    let report = dir.join("..").join(format!("report-{version}.json"));
    let (code, out) = run(Command::new(python())
        .arg(patches_dir().join("apply.py"))
        .arg("--sglang-dir")
        .arg(dir)
        .args(["--version", version, "--ledger"])
        .arg(ledger)
        .arg("--report")
        .arg(&report));
    let mut by_file = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(&report) {
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["version"], version);
        for p in v["patches"].as_array().unwrap() {
            by_file.insert(
                p["file"].as_str().unwrap().to_owned(),
                (p["status"].as_str().unwrap().to_owned(), p["detail"].as_str().unwrap().to_owned()),
            );
        }
        std::fs::remove_file(&report).unwrap();
    }
    (code, out, by_file)
}

/// What each patch changes, checked on the result (and, to keep the ranges honest, the check
/// must fail on the unpatched file). Keyed by the ledger's `file`; a new patch adds its check.
fn fixed(patch: &str, dir: &Path) -> Result<(), String> {
    match patch {
        // python/sglang/srt/models/deepseek_v2.py, DeepseekV2Model.__init__: no read of
        // `self.embed_tokens.embedding_dim` (a PPMissingLayer on stages without the embedding),
        // the hidden size from the config, and the MoE layers counted over the stage's own
        // [start_layer, end_layer) only (every `for` over self.layers in the allocator block).
        "deepseek_v2-pp-stage-allocator.patch" => {
            let script = r#"
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DeepseekV2Model")
init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
src = ast.unparse(init)
problems = []
if "self.embed_tokens.embedding_dim" in src:
    problems.append("reads self.embed_tokens.embedding_dim")
if "config.hidden_size == 7168" not in src:
    problems.append("no config.hidden_size == 7168 gate")
if "range(len(self.layers))" in src:
    problems.append("iterates over every layer, stand-ins included")
if src.count("range(self.start_layer, self.end_layer)") < 2:
    problems.append("does not count the stage's own layers")
block = src[src.index("gemm_output_zero_allocator_size = 0"):src.index("layers_to_capture")]
if "get_dsv3_gemm_output_zero_allocator_size(config.n_routed_experts, num_moe_layers, allocate_size, config.hidden_size)" not in block:
    problems.append("the allocator size is not given config.hidden_size")
print("; ".join(problems))
sys.exit(1 if problems else 0)
"#;
            let (code, out) =
                run(Command::new(python()).args(["-c", script]).arg(dir.join("srt/models/deepseek_v2.py")));
            if code == 0 { Ok(()) } else { Err(out) }
        }
        other => Err(format!("{other}: no check written for this patch in deploy/tests/sglang_patches.rs")),
    }
}

/// The tree's files (path → bytes), to show a run changed nothing.
fn snapshot(dir: &Path, files: &[String]) -> Vec<Vec<u8>> {
    files.iter().map(|f| std::fs::read(dir.join(f)).unwrap()).collect()
}

#[test]
fn every_patch_applies_where_the_ledger_says_and_is_skipped_elsewhere() {
    let ledger_path = patches_dir().join("patches.toml");
    let entries = ledger(&ledger_path);
    assert!(!entries.is_empty(), "an empty ledger");
    let mut files: Vec<String> = Vec::new();
    for e in &entries {
        for key in ["file", "fixes", "upstream", "min_version", "max_version"] {
            assert!(e[key].as_str().is_some_and(|s| !s.is_empty()), "{e}: no {key}");
        }
        assert!(e["fixed_in"].is_string(), "{e}: fixed_in must be a string (\"\" while not fixed upstream)");
        let (targets, _) = patch_targets(&patches_dir().join(e["file"].as_str().unwrap()));
        assert!(!targets.is_empty(), "{e}: the patch names no file");
        files.extend(targets);
    }
    files.sort();
    files.dedup();

    let sources = sources();
    let mut applied_on = BTreeMap::<String, Vec<String>>::new();
    for source in &sources {
        let tmp = tempfile::tempdir().unwrap();
        let pkg = tmp.path().join("sglang");
        copy_files(source, &files, &pkg);
        let before = snapshot(&pkg, &files);

        // Each patch's check fails before (the bug is in this release) where it must apply, and
        // passes where the ledger skips it (else the range leaves out a release with the bug).
        for e in &entries {
            let name = e["file"].as_str().unwrap();
            let bug = fixed(name, &pkg).is_err();
            if expected(e, &source.version) == "applied" {
                assert!(bug, "{}: {name}: the unpatched file already passes its check", source.what);
            } else {
                assert!(
                    !bug,
                    "{}: {name}: SGLang {} has the bug but the ledger skips it",
                    source.what, source.version
                );
            }
        }

        let (code, out, report) = apply(&pkg, &source.version, &ledger_path);
        assert_eq!(code, 0, "{}:\n{out}", source.what);
        for e in &entries {
            let name = e["file"].as_str().unwrap();
            let (status, detail) = report.get(name).unwrap_or_else(|| panic!("{name} not reported:\n{out}"));
            assert_eq!(status, expected(e, &source.version), "{} {name}: {detail}\n{out}", source.what);
            assert!(out.contains(&format!("sglang-patches: {status} {name}")), "{out}");
            if status == "applied" {
                let (targets, added) = patch_targets(&patches_dir().join(name));
                for t in &targets {
                    let text = std::fs::read_to_string(pkg.join(t)).unwrap();
                    for line in &added {
                        assert!(text.contains(line.as_str()), "{} {name}: {t} lacks {line:?}", source.what);
                    }
                    let (c, o) = run(Command::new(python()).args(["-m", "py_compile"]).arg(pkg.join(t)));
                    assert_eq!(c, 0, "{} {name}: {t} does not compile: {o}", source.what);
                }
                fixed(name, &pkg).unwrap_or_else(|why| panic!("{} {name}: {why}", source.what));
                applied_on.entry(name.to_owned()).or_default().push(source.version.clone());
            }
        }

        // Again: already applied, nothing changes.
        let after = snapshot(&pkg, &files);
        let (code, out, report) = apply(&pkg, &source.version, &ledger_path);
        assert_eq!(code, 0, "{out}");
        for (name, (status, _)) in &report {
            let first =
                expected(entries.iter().find(|e| e["file"] == name.as_str()).unwrap(), &source.version);
            let want = if first == "applied" { "already-applied" } else { "skipped" };
            assert_eq!(status, want, "{} {name} on a second run:\n{out}", source.what);
        }
        assert!(snapshot(&pkg, &files) == after, "{}: a second run changed the files", source.what);

        // The same files as releases outside each range: skipped, untouched.
        let fresh = tempfile::tempdir().unwrap();
        let pkg = fresh.path().join("sglang");
        copy_files(source, &files, &pkg);
        for e in &entries {
            let (min, max) =
                (release(e["min_version"].as_str().unwrap()), release(e["max_version"].as_str().unwrap()));
            let mut outside = vec![format!("{}.{}.{}", max.0, max.1, max.2 + 1)];
            if min.2 > 0 {
                outside.push(format!("{}.{}.{}", min.0, min.1, min.2 - 1));
            }
            if let Some(f) = e["fixed_in"].as_str().filter(|f| !f.is_empty()) {
                outside.push(f.to_owned());
            }
            for version in outside {
                let (code, out, report) = apply(&pkg, &version, &ledger_path);
                assert_eq!(code, 0, "{out}");
                let (status, _) = &report[e["file"].as_str().unwrap()];
                assert_eq!(status, "skipped", "{} as {version}:\n{out}", source.what);
            }
        }
        assert!(snapshot(&pkg, &files) == before, "{}: a skipped patch changed the files", source.what);
    }

    // Every patch applied on at least one release here (else its test proves nothing).
    for e in &entries {
        let name = e["file"].as_str().unwrap();
        assert!(applied_on.contains_key(name), "{name} applied on no release this machine has");
    }
    eprintln!(
        "applied: {applied_on:?} (sources: {})",
        sources.iter().map(|s| s.what.as_str()).collect::<Vec<_>>().join(", ")
    );
}

/// A ledger that records upstream's fix at the release installed: the patch is skipped.
#[test]
fn a_patch_fixed_upstream_is_skipped_from_that_release_on() {
    let entries = ledger(&patches_dir().join("patches.toml"));
    let source = sources().into_iter().find(|s| s.version == "0.5.23").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut text = std::fs::read_to_string(patches_dir().join("patches.toml")).unwrap();
    text = text.replace("fixed_in = \"\"", "fixed_in = \"0.5.23\"");
    // The patches are found next to the ledger.
    for e in &entries {
        let name = e["file"].as_str().unwrap();
        std::fs::copy(patches_dir().join(name), tmp.path().join(name)).unwrap();
    }
    let ledger_path = tmp.path().join("patches.toml");
    std::fs::write(&ledger_path, text).unwrap();
    let files: Vec<String> = entries
        .iter()
        .flat_map(|e| patch_targets(&patches_dir().join(e["file"].as_str().unwrap())).0)
        .collect();
    let pkg = tmp.path().join("sglang");
    copy_files(&source, &files, &pkg);
    let before = snapshot(&pkg, &files);
    for version in ["0.5.23", "0.5.23.post1"] {
        let (code, out, report) = apply(&pkg, version, &ledger_path);
        assert_eq!(code, 0, "{out}");
        for (name, (status, detail)) in &report {
            assert_eq!(status, "skipped", "{name}: {out}");
            assert!(detail.contains("fixed upstream in 0.5.23"), "{detail}");
        }
    }
    assert!(snapshot(&pkg, &files) == before);
    // Before the fix it still applies.
    let (code, out, report) = apply(&pkg, "0.5.22", &ledger_path);
    assert_eq!(code, 0, "{out}");
    assert!(report.values().all(|(s, _)| s == "applied"), "{out}");
}

/// A file whose lines do not match: the run fails loudly, with patch's reason, and the file
/// is left as it was.
#[test]
fn a_patch_that_does_not_match_fails_the_run() {
    let entries = ledger(&patches_dir().join("patches.toml"));
    let source = sources().into_iter().find(|s| s.version == "0.5.23").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let pkg = tmp.path().join("sglang");
    let e = &entries[0];
    let name = e["file"].as_str().unwrap();
    let (files, _) = patch_targets(&patches_dir().join(name));
    copy_files(&source, &files, &pkg);
    // Upstream reworded one line the patch changes (as a new release might).
    let target = pkg.join(&files[0]);
    let text = std::fs::read_to_string(&target).unwrap();
    let patch = std::fs::read_to_string(patches_dir().join(name)).unwrap();
    let removed =
        patch.lines().find(|l| l.starts_with('-') && !l.starts_with("---")).unwrap()[1..].to_owned();
    assert!(text.contains(&removed));
    let changed = text.replacen(&removed, &format!("{removed}  # reworded"), 1);
    std::fs::write(&target, &changed).unwrap();
    let (code, out, report) = apply(&pkg, "0.5.23", &patches_dir().join("patches.toml"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("sglang-patches: FAILED {name}")), "{out}");
    assert_eq!(report[name].0, "FAILED");
    assert!(report[name].1.contains("does not apply cleanly"), "{:?}", report[name]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), changed, "a failed patch changed the file");
}

/// The image applies the set: the `sglang` target copies the folder and runs apply.py, after
/// SGLang is in place (it is the base) and before dropping root.
#[test]
fn the_sglang_image_target_runs_apply_py() {
    let dockerfile = std::fs::read_to_string(infera_deploy::dir().join("docker/Dockerfile")).unwrap();
    let stage = dockerfile.split("AS sglang\n").nth(1).expect("a `sglang` target");
    let copy =
        stage.find("COPY deploy/docker/sglang-patches/ /opt/infera/sglang-patches/").expect("the COPY");
    let run = stage.find("python3 /opt/infera/sglang-patches/apply.py").expect("the RUN");
    let user = stage.find("USER 10001").expect("USER");
    assert!(copy < run && run < user, "{stage}");
}

/// The fix in behaviour, on the real SGLang with torch (the CPU engine venv, 0.5.23):
/// `sglang_pp_stage.py` builds DeepseekV2Model's four PP stages as MI355X's aiter gfx950 path
/// would, for DeepSeek V3's shape (hidden 7168) and GLM-5's (6144), with and without EAGLE.
/// The installed file fails as the kits did — GLM-5's middle stages on
/// `PPMissingLayer.embedding_dim` — and the patched one builds every stage, sizing each
/// stage's allocator for its own MoE layers, and computes what the installed file computes
/// without PP.
#[test]
fn the_patched_model_builds_every_pipeline_stage() {
    let python = std::env::var_os("INFERA_SGLANG_ENGINE_PYTHON")
        .map_or_else(|| root().join(".venv-sglang-engine/bin/python"), PathBuf::from);
    if !python.is_file() {
        assert!(
            std::env::var_os("INFERA_SGLANG_ENGINE_PYTHON").is_none(),
            "{} is missing: run `cargo xtask setup`",
            python.display()
        );
        eprintln!("skipped: no SGLang engine venv at {} (cargo xtask setup)", python.display());
        return;
    }
    let venv = python.parent().and_then(Path::parent).unwrap().to_owned();
    let source = sources().into_iter().find(|s| s.what == venv.display().to_string());
    let source = source.unwrap_or_else(|| Source {
        what: venv.display().to_string(),
        version: dist_version(&site_packages(&venv).unwrap()).unwrap(),
        place: Place::Dir(site_packages(&venv).unwrap().join("sglang")),
    });
    let ledger_path = patches_dir().join("patches.toml");
    let entry = ledger(&ledger_path)
        .into_iter()
        .find(|e| e["file"] == "deepseek_v2-pp-stage-allocator.patch")
        .expect("the PP-stage patch in the ledger");
    assert_eq!(expected(&entry, &source.version), "applied", "the engine venv's SGLang {}", source.version);

    let file = "srt/models/deepseek_v2.py".to_owned();
    let tmp = tempfile::tempdir().unwrap();
    let (installed, patched) = (tmp.path().join("installed/sglang"), tmp.path().join("patched/sglang"));
    copy_files(&source, std::slice::from_ref(&file), &installed);
    copy_files(&source, std::slice::from_ref(&file), &patched);
    let (code, out, _) = apply(&patched, &source.version, &ledger_path);
    assert_eq!(code, 0, "{out}");

    // Its stdout is the JSON; stderr carries SGLang's import-time warnings.
    let stages = |pkg: &Path| -> serde_json::Map<String, Value> {
        let out = Command::new(&python)
            .arg(infera_deploy::dir().join("tests/sglang_pp_stage.py"))
            .arg(pkg.join(&file))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        v.as_object().unwrap().clone()
    };
    let before = stages(&installed);
    let after = stages(&patched);

    // The bug, reproduced: GLM-5's middle stages and DeepSeek V3's stages under PP fail.
    for rank in [1, 2] {
        for eagle in [false, true] {
            let key = format!("glm5 pp4 rank{rank} eagle={}", if eagle { "True" } else { "False" });
            let error = before[&key]["error"].as_str().unwrap_or_else(|| panic!("{key}: {}", before[&key]));
            assert!(
                error.contains("'PPMissingLayer' object has no attribute 'embedding_dim'"),
                "{key}: {error}"
            );
        }
    }
    assert!(
        before["deepseek_v3 pp4 rank0 eagle=False"]["error"].as_str().is_some_and(|e| e.contains("'mlp'"))
    );

    // Fixed: every stage builds; one MoE layer's share is 256 × (2 × 2048 + 256) (layers 0–2 are
    // dense: stage 0 has one MoE layer, the others four); GLM-5's hidden size needs none.
    let per_layer = 256 * (2 * 2048 + 256);
    for (key, result) in &after {
        let size = result["size"].as_i64().unwrap_or_else(|| panic!("{key}: {result}"));
        let want = match key.as_str() {
            k if k.starts_with("glm5") => 0,
            k if k.contains("pp1") => 13 * per_layer,
            k if k.contains("rank0") => per_layer,
            _ => 4 * per_layer,
        };
        assert_eq!(size, want, "{key}");
    }
    // Without PP the patch changes nothing.
    for key in ["deepseek_v3 pp1 rank0 eagle=False", "glm5 pp1 rank0 eagle=False"] {
        assert_eq!(before[key], after[key], "{key}");
    }
}

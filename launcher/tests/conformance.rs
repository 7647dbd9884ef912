//! Every command line the launcher generates — all examples, every role — parsed by SGLang's
//! real argparse parser (`sglang_cli_check.py`, `reference/sglang.md` §4) for the oldest and
//! the newest supported release. The venvs come from `cargo xtask setup`; `cargo xtask test`
//! passes their Pythons as `INFERA_SGLANG_<X_Y_Z>_PYTHON`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use infera_launcher::version::SglangVersion;
use infera_launcher::{WorkerPlan, plan_file};
use serde_json::Value;

const EXAMPLES: &[&str] = &[
    "examples/sglang_2p1d_glm5.2/deployment.toml",
    "examples/sglang_2p1d_glm5.2/1p1d.toml",
    "examples/sglang_2p1d_glm5.2/1p1d_decode4.toml",
    "examples/sglang_mix_glm5.2/deployment.toml",
    "examples/sim_1p1d/deployment.toml",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The venv Python holding SGLang `version`.
fn python(version: &str) -> PathBuf {
    let var = format!("INFERA_SGLANG_{}_PYTHON", version.replace('.', "_"));
    let python = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(format!(".venv-sglang-{version}/bin/python")));
    assert!(
        python.exists(),
        "no Python with SGLang {version} at {} ({var}): run `cargo xtask setup`",
        python.display()
    );
    python
}

/// Parses each argv (arguments after the program) in one Python process; one JSON per argv.
fn parse_all(version: &str, argvs: &[Vec<String>]) -> Vec<Value> {
    let mut cmd = Command::new(python(version));
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sglang_cli_check.py"));
    if version == "0.5.18" {
        // 0.5.18's server_args imports sglang.srt.configs, which needs transformers + torchvision.
        cmd.arg("--fake-transformers");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the probe");
    let mut input = String::new();
    for argv in argvs {
        input.push_str(&serde_json::to_string(argv).unwrap());
        input.push('\n');
    }
    // Written from a thread: the answers are large, and the probe must be able to write them
    // while it still reads.
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "the SGLang {version} probe failed (run `cargo xtask setup`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(results.len(), argvs.len(), "one answer per argv");
    for r in &results {
        assert_eq!(r["version"], version, "the venv holds another SGLang");
    }
    results
}

/// Every example's workers, re-rendered for `version`.
fn workers_at(version: SglangVersion) -> Vec<(String, WorkerPlan)> {
    let mut all = Vec::new();
    for example in EXAMPLES {
        let plan = plan_file(&root().join(example)).unwrap_or_else(|e| panic!("{e}"));
        for mut w in plan.workers {
            w.args.version = version;
            all.push((format!("{example} {}", w.name), w));
        }
    }
    all
}

/// Runs every generated argv through SGLang `version`'s parser and checks the parsed values.
fn every_generated_argv_parses(version: &str) {
    let v: SglangVersion = version.parse().unwrap();
    let workers = workers_at(v);
    let argvs: Vec<Vec<String>> = workers.iter().map(|(_, w)| w.args.render()).collect();
    let results = parse_all(version, &argvs);
    for ((name, w), r) in workers.iter().zip(&results) {
        // The launcher refuses a file whose schedule policy the version lacks; SGLang must agree.
        let policy_known = w.args.scheduling.schedule_policy.is_none_or(|p| p.exists_in(v));
        if !policy_known {
            assert_eq!(r["ok"], false, "{name}: SGLang {version} accepts a policy the launcher refuses");
            assert!(r["stderr"][0].as_str().unwrap().contains("--schedule-policy"), "{name}: {r}");
            continue;
        }
        assert_eq!(r["ok"], true, "{name}: SGLang {version} rejects {:?}: {}", w.args.render(), r["stderr"]);
        let a = &r["args"];
        let p = w.args.parallel;
        assert_eq!(a["model_path"], w.args.server.model_path.as_str(), "{name}");
        assert_eq!(a["port"], w.args.server.port, "{name}");
        assert_eq!(a["tp_size"], p.tp, "{name}");
        assert_eq!(a["pp_size"], p.pp, "{name}");
        if v.has_attn_dp_size() {
            assert_eq!(a["attn_dp_size"], p.attn_dp, "{name}");
            assert_eq!(a["dp_size"], p.dp, "{name}");
            assert_eq!(a["enable_dp_attention"], false, "{name}");
        } else {
            assert_eq!(a["dp_size"], p.dp_ranks(), "{name}");
            assert_eq!(a["enable_dp_attention"], p.attn_dp > 1, "{name}");
        }
        assert_eq!(a["cuda_graph_max_bs_decode"], serde_json::json!(w.args.graphs.max_bs_decode), "{name}");
        let mode = w.args.disaggregation.as_ref().map_or("null", |d| match d.mode {
            infera_launcher::sglang::DisaggregationMode::Prefill => "prefill",
            infera_launcher::sglang::DisaggregationMode::Decode => "decode",
        });
        assert_eq!(a["disaggregation_mode"], mode, "{name}");
        let steps = w.args.speculative.as_ref().map(|s| s.num_steps);
        assert_eq!(a["speculative_num_steps"], serde_json::json!(steps), "{name}");
        let kv = w.args.kv_events.as_ref().map(|k| k.config_json());
        assert_eq!(a["kv_events_config"], serde_json::json!(kv), "{name}");
        // No deprecated spelling, except 0.5.18's own alias for the decode CUDA-graph cap.
        let warnings: Vec<&str> = r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|w| !w.starts_with("'--cuda-graph-max-bs' is deprecated"))
            .collect();
        assert!(warnings.is_empty(), "{name}: SGLang {version} warns {warnings:?}");
    }
}

#[test]
fn sglang_0_5_18_parses_every_generated_argv() {
    every_generated_argv_parses("0.5.18");
}

#[test]
fn sglang_0_5_23_parses_every_generated_argv() {
    every_generated_argv_parses("0.5.23");
}

#[test]
fn the_unmapped_cuda_graph_flag_is_ambiguous_on_0_5_23_only() {
    let argv =
        vec!["--model-path".to_owned(), "m".to_owned(), "--cuda-graph-max-bs".to_owned(), "8".to_owned()];
    let new = &parse_all("0.5.23", std::slice::from_ref(&argv))[0];
    assert_eq!(new["ok"], false, "{new}");
    assert_eq!(
        new["stderr"][0],
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, \
         --cuda-graph-max-bs-prefill"
    );
    let old = &parse_all("0.5.18", &[argv])[0];
    assert_eq!(old["ok"], true, "{old}");
    assert_eq!(old["args"]["cuda_graph_max_bs_decode"], 8);
}

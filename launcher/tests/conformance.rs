//! Every command line the launcher generates — all examples and the kitchen-sink fixture
//! (every typed key), every role — parsed by SGLang's real argparse parser (built as SGLang 0.5.23
//! `python/sglang/srt/server_args.py` `prepare_server_args` builds it, by `sglang_cli_check.py`
//! next to this file) for the oldest and the newest supported release, with the parsed values
//! checked. The venvs come from `cargo xtask setup`; `cargo xtask test`
//! passes their Pythons as `INFERA_SGLANG_<X_Y_Z>_PYTHON`.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use infera_launcher::version::SglangVersion;
use infera_launcher::{LaunchError, WorkerPlan, plan_file, plan_text};
use serde_json::Value;

/// Every example, and the fixture that sets every key.
const FILES: &[&str] = &[
    "examples/sglang_2p1d_glm5.2/deployment.toml",
    "examples/sglang_2p1d_glm5.2/1p1d.toml",
    "examples/sglang_2p1d_glm5.2/1p1d_decode4.toml",
    "examples/sglang_mix_glm5.2/deployment.toml",
    "examples/sim_1p1d/deployment.toml",
    "examples/sglang_cpu_1p1d/deployment.toml",
    "examples/sglang_qwen3_8b/aggregated.toml",
    "examples/sglang_qwen3_8b/1p1d.toml",
    "launcher/tests/fixtures/kitchen_sink.toml",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The venv Python holding SGLang `version` (`INFERA_SGLANG_<X_Y_Z>_PYTHON`, else the venv
/// `cargo xtask setup` made).
fn python(version: &str) -> PathBuf {
    infera_kv::testing::sglang_python(version)
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

/// The launcher's own verdict on `file` claiming `version`: the fields it refuses.
fn refused_fields(file: &str, version: SglangVersion) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let line = text.lines().find(|l| l.starts_with("sglang_version = ")).expect("the file names its version");
    let text = text.replace(line, &format!("sglang_version = \"{version}\""));
    match plan_text(Path::new(file), &text) {
        Ok(_) => BTreeSet::new(),
        Err(LaunchError::Invalid(e)) => e.problems.into_iter().map(|p| p.field).collect(),
        Err(e) => panic!("{file} at {version}: {e}"),
    }
}

/// One argv for SGLang's parser.
struct Case {
    /// File and worker, and what was removed from its argv.
    name: String,
    worker: WorkerPlan,
    /// `Some(flag)`: the argv keeps a setting the version lacks, so SGLang must reject `flag`.
    rejected: Option<&'static str>,
}

/// Every worker of every file, re-rendered for `version`. A worker with settings the version
/// lacks (the launcher refuses them, naming the field) is parsed twice: as it is, which SGLang
/// must reject too, and without those settings, which must parse — so the rest of its argv is
/// checked on that version as well.
fn cases_at(version: SglangVersion) -> Vec<Case> {
    let mut all = Vec::new();
    for file in FILES {
        let plan = plan_file(&root().join(file)).unwrap_or_else(|e| panic!("{e}"));
        let mut lacking = BTreeSet::new();
        for mut w in plan.workers {
            w.args.version = version;
            let role = w.role.as_str();
            let mut dropped = Vec::new();
            if w.args.scheduling.schedule_policy.is_some_and(|p| !p.exists_in(version)) {
                let name = format!("{file} {} as it is", w.name);
                all.push(Case { name, worker: w.clone(), rejected: Some("--schedule-policy") });
                lacking.insert(format!("{role}.schedule_policy"));
                w.args.scheduling.schedule_policy = None;
                dropped.push("schedule_policy");
            }
            let p = w.args.parallel;
            if p.dp > 1 && p.attn_dp > 1 && !version.has_attn_dp_size() {
                // Before 0.5.22 one --dp-size means either replicas or attention DP.
                lacking.insert(format!("{role}.dp"));
                w.args.parallel.dp = 1;
                dropped.push("dp");
            }
            let name = match dropped.as_slice() {
                [] => format!("{file} {}", w.name),
                d => format!("{file} {} without {}", w.name, d.join(", ")),
            };
            all.push(Case { name, worker: w, rejected: None });
        }
        assert_eq!(
            refused_fields(file, version),
            lacking,
            "{file} at {version}: the launcher refuses exactly that"
        );
    }
    all
}

/// The parsed values of every typed setting the worker's argv carries.
fn check_values(name: &str, v: SglangVersion, w: &WorkerPlan, a: &Value) {
    use serde_json::json;
    let (s, p, sched, g) = (&w.args.server, w.args.parallel, &w.args.scheduling, w.args.graphs);
    let mut want = vec![
        ("model_path", json!(s.model_path)),
        ("host", json!(s.host)),
        ("port", json!(s.port)),
        ("trust_remote_code", json!(s.trust_remote_code)),
        ("enable_metrics", json!(s.enable_metrics)),
        ("tp_size", json!(p.tp)),
        ("pp_size", json!(p.pp)),
        ("cuda_graph_max_bs_decode", json!(g.max_bs_decode)),
        ("disable_custom_all_reduce", json!(g.disable_custom_all_reduce)),
        ("disable_overlap_schedule", json!(sched.disable_overlap_schedule)),
        ("enable_hierarchical_cache", json!(w.args.hicache.is_some())),
        ("speculative_num_steps", json!(w.args.speculative.as_ref().map(|s| s.num_steps))),
        ("kv_events_config", json!(w.args.kv_events.as_ref().map(|k| k.config_json()))),
    ];
    if v.has_load_publish_endpoint() {
        let endpoint = w.args.load_publish_port().map(|port| format!("tcp://*:{port}"));
        want.push(("load_publish_endpoint", json!(endpoint)));
    }
    if v.has_attn_dp_size() {
        want.extend([("attn_dp_size", json!(p.attn_dp)), ("dp_size", json!(p.dp))]);
        want.push(("enable_dp_attention", json!(false)));
    } else {
        want.extend([("dp_size", json!(p.dp_ranks())), ("enable_dp_attention", json!(p.attn_dp > 1))]);
    }
    let mode = w.args.disaggregation.as_ref().map(|d| match d.mode {
        infera_launcher::sglang::DisaggregationMode::Prefill => "prefill",
        infera_launcher::sglang::DisaggregationMode::Decode => "decode",
    });
    want.push(("disaggregation_mode", json!(mode.unwrap_or("null"))));
    // Settings left unset keep SGLang's defaults, which differ per version: compared when set.
    let mut set = |dest, value: Option<Value>| {
        if let Some(value) = value {
            want.push((dest, value));
        }
    };
    set("served_model_name", s.served_model_name.as_ref().map(|n| json!(n)));
    set("context_length", s.context_length.map(|n| json!(n)));
    set("page_size", s.page_size.map(|n| json!(n)));
    set("chunked_prefill_size", sched.chunked_prefill_size.map(|n| json!(n)));
    set("schedule_policy", sched.schedule_policy.map(|p| json!(p.as_str())));
    set("mem_fraction_static", sched.mem_fraction_static.map(|f| json!(f)));
    set("max_running_requests", sched.max_running_requests.map(|n| json!(n)));
    set("cuda_graph_max_bs_prefill", g.max_bs_prefill.map(|n| json!(n)));
    if let Some(d) = &w.args.disaggregation {
        set("disaggregation_bootstrap_port", d.bootstrap_port.map(|n| json!(n)));
        set("disaggregation_transfer_backend", d.backend.map(|b| json!(b.as_str())));
        set("disaggregation_ib_device", (!d.ib_devices.is_empty()).then(|| json!(d.ib_devices.join(","))));
    }
    if let Some(h) = &w.args.hicache {
        set("hicache_size", h.size_gb.map(|n| json!(n)));
        set("hicache_ratio", h.ratio.map(|r| json!(r)));
        set("hicache_write_policy", h.write_policy.map(|p| json!(p.as_str())));
    }
    if let Some(sp) = &w.args.speculative {
        set("speculative_algorithm", Some(json!(sp.algorithm.as_str())));
        set("speculative_eagle_topk", Some(json!(sp.eagle_topk)));
        set("speculative_num_draft_tokens", Some(json!(sp.num_draft_tokens)));
        set("speculative_draft_model_path", sp.draft_model_path.as_ref().map(|m| json!(m)));
    }
    for (dest, value) in want {
        assert_eq!(a[dest], value, "{name}: {dest} on SGLang {v}");
    }
}

/// Runs every generated argv through SGLang `version`'s parser and checks the parsed values.
fn every_generated_argv_parses(version: &str) {
    let v: SglangVersion = version.parse().unwrap();
    let cases = cases_at(v);
    let argvs: Vec<Vec<String>> = cases.iter().map(|c| c.worker.args.render()).collect();
    let results = parse_all(version, &argvs);
    for (Case { name, worker: w, rejected }, r) in cases.iter().zip(&results) {
        if let Some(flag) = rejected {
            assert_eq!(r["ok"], false, "{name}: SGLang {version} accepts what the launcher refuses");
            assert!(r["stderr"][0].as_str().unwrap().contains(flag), "{name}: {r}");
            continue;
        }
        assert_eq!(r["ok"], true, "{name}: SGLang {version} rejects {:?}: {}", w.args.render(), r["stderr"]);
        check_values(name, v, w, &r["args"]);
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
    // The kitchen sink and every example are in; on the oldest version, the workers it lacks
    // settings for are parsed both ways.
    assert!(cases.iter().any(|c| c.name.contains("kitchen_sink")));
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

/// `--load-publish-endpoint` is 0.5.23's and not 0.5.18's, so the launcher renders it per version;
/// the kitchen sink's decode asks for it and gets it only on 0.5.23.
#[test]
fn the_load_socket_flag_is_rendered_where_sglang_has_it() {
    let plan = plan_file(&root().join("launcher/tests/fixtures/kitchen_sink.toml")).unwrap();
    let mut w =
        plan.workers.into_iter().find(|w| w.args.load_events.is_some()).expect("a worker asks for it");
    let has = |w: &WorkerPlan| w.args.render().iter().any(|a| a == "--load-publish-endpoint");
    assert!(has(&w), "the fixture claims 0.5.23");
    w.args.version = SglangVersion::OLDEST;
    assert!(!has(&w), "0.5.18 has no --load-publish-endpoint");
    let mut argv = w.args.render();
    argv.extend(["--load-publish-endpoint".to_owned(), "tcp://*:6208".to_owned()]);
    let old = &parse_all("0.5.18", &[argv])[0];
    assert_eq!(old["ok"], false, "{old}");
    assert!(old["stderr"][0].as_str().unwrap().contains("--load-publish-endpoint"), "{old}");
}

/// The sim's tables of SGLang's flags (`sim/src/sglang_flags/`) are what SGLang's own parser
/// lists, so the sim warns exactly on the flags SGLang would reject.
#[test]
fn the_sims_sglang_flag_tables_are_sglangs_own() {
    for version in ["0.5.18", "0.5.23"] {
        let mut cmd = Command::new(python(version));
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sglang_cli_check.py"));
        if version == "0.5.18" {
            cmd.arg("--fake-transformers");
        }
        let out = cmd.arg("--list-flags").stderr(Stdio::null()).output().expect("start the probe");
        assert!(out.status.success(), "the SGLang {version} probe failed (run `cargo xtask setup`)");
        let listed = String::from_utf8(out.stdout).unwrap();
        let table =
            std::fs::read_to_string(root().join(format!("sim/src/sglang_flags/{version}.tsv"))).unwrap();
        assert!(
            listed.trim_end() == table.trim_end(),
            "sim/src/sglang_flags/{version}.tsv is stale: regenerate it with `.venv-sglang-{version}/bin/python \
             launcher/tests/sglang_cli_check.py{} --list-flags`",
            if version == "0.5.18" { " --fake-transformers" } else { "" }
        );
    }
}

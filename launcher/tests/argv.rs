//! Golden command lines: every example's plan, and the kitchen-sink fixture's (every key of
//! the format set), argv + env of each role and shape, against a checked-in file, and the version-dependent spellings of one worker across SGLang versions.
//! `INFERA_BLESS=1 cargo test -p infera-launcher --test argv` rewrites the golden files.

use std::path::{Path, PathBuf};

use infera_launcher::{Plan, plan_file, plan_text};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Every example deployment, with the name of its golden file.
const EXAMPLES: &[(&str, &str)] = &[
    ("examples/sglang_2p1d_glm5.2/deployment.toml", "glm5.2_2p1d.plan"),
    ("examples/sglang_2p1d_glm5.2/1p1d.toml", "glm5.2_1p1d.plan"),
    ("examples/sglang_2p1d_glm5.2/1p1d_decode4.toml", "glm5.2_1p1d_decode4.plan"),
    ("examples/sglang_mix_glm5.2/deployment.toml", "glm5.2_mix.plan"),
    ("examples/sim_1p1d/deployment.toml", "sim_1p1d.plan"),
    ("examples/sglang_qwen3_8b/aggregated.toml", "qwen3_8b_aggregated.plan"),
    ("examples/sglang_qwen3_8b/1p1d.toml", "qwen3_8b_1p1d.plan"),
    ("launcher/tests/fixtures/kitchen_sink.toml", "kitchen_sink.plan"),
];

#[test]
fn every_example_matches_its_golden_plan() {
    for (example, golden) in EXAMPLES {
        let plan = plan_file(&root().join(example)).unwrap_or_else(|e| panic!("{example}: {e}"));
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(golden);
        let rendered = plan.render();
        if std::env::var_os("INFERA_BLESS").is_some() {
            std::fs::write(&golden, &rendered).unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
        assert_eq!(rendered, want, "{example} differs from {}", golden.display());
    }
}

/// A decode with attention DP and a CUDA-graph cap, and a PP prefill, at one version.
fn pd_at(version: &str) -> Plan {
    let text = format!(
        r#"
engine = "sglang"
sglang_version = "{version}"
[model]
path = "m"
num_layers = 8
[prefill]
pp = 2
pp_layers = [4, 4]
[[prefill.workers]]
name = "p"
gpus = [0, 1]
port = 30000
[decode]
tp = 4
attn_dp = 4
cuda_graph_max_bs = 32
[decode.speculative]
algorithm = "EAGLE"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
[[decode.workers]]
name = "d"
gpus = [2, 3, 4, 5]
port = 30001
"#
    );
    plan_text(Path::new("pd.toml"), &text).unwrap_or_else(|e| panic!("{e}"))
}

fn args(plan: &Plan, worker: usize) -> Vec<String> {
    plan.workers[worker].args.render()
}

#[test]
fn decode_spellings_follow_the_sglang_version() {
    let head = ["--model-path", "m", "--host", "127.0.0.1", "--port", "30001", "--tp-size", "4"];
    let tail =
        ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"];
    let expect = |middle: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        v.extend(middle.iter().map(|s| s.to_string()));
        v.extend(tail.iter().map(|s| s.to_string()));
        v.extend(["--speculative-num-draft-tokens".to_owned(), "4".to_owned()]);
        v
    };
    // 0.5.18: attention DP through --dp-size + --enable-dp-attention; the exact old graph flag.
    assert_eq!(
        args(&pd_at("0.5.18"), 1),
        expect(&[
            "--dp-size",
            "4",
            "--enable-dp-attention",
            "--disaggregation-mode",
            "decode",
            "--cuda-graph-max-bs",
            "32"
        ])
    );
    // 0.5.21: the graph flag is split (the old spelling would be ambiguous), DP still old-style.
    assert_eq!(
        args(&pd_at("0.5.21"), 1),
        expect(&[
            "--dp-size",
            "4",
            "--enable-dp-attention",
            "--disaggregation-mode",
            "decode",
            "--cuda-graph-max-bs-decode",
            "32"
        ])
    );
    // 0.5.22+: --attn-dp-size.
    for v in ["0.5.22", "0.5.23"] {
        assert_eq!(
            args(&pd_at(v), 1),
            expect(&[
                "--attn-dp-size",
                "4",
                "--disaggregation-mode",
                "decode",
                "--cuda-graph-max-bs-decode",
                "32"
            ]),
            "{v}"
        );
    }
}

#[test]
fn prefills_mirror_the_decode_speculation_and_carry_the_layer_partition() {
    let plan = pd_at("0.5.23");
    let prefill = &plan.workers[0];
    assert_eq!(
        prefill.args.render(),
        [
            "--model-path",
            "m",
            "--host",
            "127.0.0.1",
            "--port",
            "30000",
            "--tp-size",
            "1",
            "--pp-size",
            "2",
            "--disaggregation-mode",
            "prefill",
            "--disaggregation-bootstrap-port",
            "8998",
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ]
    );
    assert_eq!(prefill.env["SGLANG_PP_LAYER_PARTITION"], "4,4");
    assert_eq!(prefill.env["CUDA_VISIBLE_DEVICES"], "0,1");
    assert_eq!(prefill.argv()[..3], ["python3", "-m", "sglang.launch_server"]);
}

#[test]
fn kv_events_get_per_worker_ports_that_do_not_overlap() {
    let plan = plan_file(&root().join("examples/sglang_2p1d_glm5.2/deployment.toml")).unwrap();
    let configs: Vec<serde_json::Value> = plan
        .workers
        .iter()
        .map(|w| {
            let argv = w.args.render();
            let i = argv.iter().position(|a| a == "--kv-events-config").unwrap();
            serde_json::from_str(&argv[i + 1]).unwrap()
        })
        .collect();
    let endpoints: Vec<(&str, &str)> = configs
        .iter()
        .map(|c| (c["endpoint"].as_str().unwrap(), c["replay_endpoint"].as_str().unwrap()))
        .collect();
    // Prefills: one DP rank each; the decode: 8 PUB ports from 5600, replay from 5608.
    assert_eq!(
        endpoints,
        [
            ("tcp://*:5557", "tcp://*:5558"),
            ("tcp://*:5567", "tcp://*:5568"),
            ("tcp://*:5600", "tcp://*:5608")
        ]
    );
    assert_eq!(configs[2]["topic"], "kv@decode-0");
    assert_eq!(configs[2]["publisher"], "zmq");
}

#[test]
fn the_sim_accepts_the_sim_example_argv() {
    let plan = plan_file(&root().join("examples/sim_1p1d/deployment.toml")).unwrap();
    for w in &plan.workers {
        assert_eq!(w.program, ["infera-sim"]);
        assert_eq!(w.env["INFERA_SIM_SGLANG_VERSION"], "0.5.23");
        let config = infera_sim::config::SimConfig::from_argv(w.argv())
            .unwrap_or_else(|e| panic!("{}: the sim rejects {:?}: {e:#}", w.name, w.argv()));
        assert_eq!(config.port, w.args.server.port);
        assert_eq!(config.ranks, w.args.parallel.dp_ranks());
        assert_eq!(config.attention_dp, w.args.parallel.attn_dp > 1);
    }
}

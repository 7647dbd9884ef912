//! The kits' scripts (`examples/kit/`: smoke, GSM8K eval, AgentX replay) against a running
//! deployment: `infera-launch up` on the sim 1P1D example (`examples/sim_1p1d/`) with every
//! port picked at run time and KV and load events on, then each script given only the
//! deployment file, as an operator runs them (manual/guides/kits.md):
//!
//! - `smoke.py`: exit 0, every check PASS or SKIP with a reason, and PD, chat, stream, KV
//!   events, DP attention, EAGLE (flags and acceptance) and the load socket PASS; the same
//!   system checked against a file that claims another page size FAILs that check (exit 1);
//! - `eval.py`: the scoring's self-check, then the bundled 5-question GSM8K fixture: a strict
//!   and a flexible accuracy in [0, 1], every sample answered, the JSON written;
//! - `agentx.py`: the bundled 2-session trace, cut to 2 turns per session, through
//!   `infera-bench replay`: 4 requests completed, none failed, TTFT and ITL reported, and the
//!   trace's 20–30 s think times capped (`--think-cap-s`).
//!
//! Binaries: `INFERA_BIN_DIR` (else `target/debug`), infera-bench included. Python: `INFERA_PYTHON`
//! (set by `cargo xtask test`), else `.venv/bin/python`: 3.11+ with the `openai` client.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::{Launch, bin_dir, root};

fn python() -> PathBuf {
    std::env::var_os("INFERA_PYTHON").map_or_else(|| root().join(".venv/bin/python"), PathBuf::from)
}

fn kit(script: &str) -> PathBuf {
    root().join("examples/kit").join(script)
}

/// Ports picked now and held (bound) until the file is written, so no two of them collide.
#[derive(Default)]
struct Ports(Vec<TcpListener>);

impl Ports {
    /// A free port.
    fn one(&mut self) -> i64 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        self.0.push(l);
        i64::from(port)
    }

    /// The first of `n` consecutive free ports, on every address (ZMQ binds `tcp://*:P`).
    fn range(&mut self, n: u16) -> i64 {
        for _ in 0..100 {
            let base = TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
            if base.checked_add(n).is_none() {
                continue;
            }
            let held: Vec<_> =
                (base..base + n).map_while(|p| TcpListener::bind(("0.0.0.0", p)).ok()).collect();
            if held.len() == usize::from(n) {
                self.0.extend(held);
                return i64::from(base);
            }
        }
        panic!("no {n} consecutive free ports");
    }
}

/// The sim example with its ports picked now: KV events on both workers (the decode's 8 ranks
/// also publish their load), control's metrics and the proxy on ports of their own.
fn deployment(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("examples/sim_1p1d/deployment.toml")).unwrap();
    let mut doc: toml::Table = toml::from_str(&text).unwrap();
    let mut ports = Ports::default();
    for (role, ranks, load) in [("prefill", 1, false), ("decode", 8, true)] {
        let w = doc[role]["workers"].as_array_mut().unwrap()[0].as_table_mut().unwrap();
        w.insert("port".into(), ports.one().into());
        // PUB and replay ports (2R), then the load sockets (R) when on.
        let span = if load { 3 * ranks } else { 2 * ranks };
        w.insert("kv_events_port".into(), ports.range(span).into());
        w.insert("load_events".into(), load.into());
        if role == "prefill" {
            w.insert("bootstrap_port".into(), ports.one().into());
        }
    }
    let router = doc["router"].as_table_mut().unwrap();
    router.insert("listen".into(), "127.0.0.1:0".into());
    router.insert("metrics_listen".into(), format!("127.0.0.1:{}", ports.one()).into());
    router.insert("proxies".into(), toml::Value::Array(vec![format!("127.0.0.1:{}", ports.one()).into()]));
    let path = dir.join("deployment.toml");
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    path
}

/// Runs a kit script; (exit code, stdout + stderr).
fn run(script: &str, args: &[&str], cwd: &Path) -> (i32, String) {
    let out = Command::new(python())
        .arg(kit(script))
        .args(args)
        .current_dir(cwd)
        .env("INFERA_BIN_DIR", bin_dir())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", python().display()));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// (check → (status, evidence)) of a smoke JSON table.
fn smoke_rows(path: &Path) -> Vec<(String, String, String)> {
    read_json(path)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_owned();
            (s("check"), s("status"), s("evidence"))
        })
        .collect()
}

#[test]
fn the_kit_scripts_run_against_the_sim_deployment() {
    let bench = bin_dir().join("infera-bench");
    assert!(bench.is_file(), "{} is missing: cargo build -p infera-bench", bench.display());
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path());
    let state = dir.path().join("state");
    let mut up = Launch::start(&file, &["--state-dir", state.to_str().unwrap()]);
    up.until("infera-launch ready").unwrap_or_else(|| panic!("never ready:\n{}", up.stderr()));
    let f = file.to_str().unwrap();

    // smoke: everything from the file (the proxy and control's metrics included).
    let smoke_json = dir.path().join("smoke.json");
    let (code, out) = run("smoke.py", &[f, "--json", smoke_json.to_str().unwrap()], dir.path());
    assert_eq!(code, 0, "{out}\n{}", up.stderr());
    let rows = smoke_rows(&smoke_json);
    for (check, status, evidence) in &rows {
        assert!(status == "PASS" || status == "SKIP", "{check}: {status} {evidence}\n{out}");
        assert!(!evidence.is_empty(), "{check}: {status} without evidence or reason");
    }
    for must in [
        "PD: request reaches both legs",
        "proxy: chat completion",
        "proxy: streamed chat",
        "proxy: model listed",
        "KV events reach control",
        "prefill-0: PD prefill",
        "decode-0: PD decode",
        "decode-0: DP attention",
        "decode-0: speculative (EAGLE)",
        "decode-0: speculative acceptance",
        "decode-0: load events",
        "decode-0: page size",
        "prefill-0: KV events config",
    ] {
        let row = rows.iter().find(|r| r.0 == must).unwrap_or_else(|| panic!("no {must} row:\n{out}"));
        assert_eq!(row.1, "PASS", "{must}: {}\n{out}", row.2);
    }

    // The same system against a file that claims another page size: that check fails.
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(
        &wrong,
        std::fs::read_to_string(&file).unwrap().replace("page_size = 64", "page_size = 128"),
    )
    .unwrap();
    let wrong_json = dir.path().join("wrong.json");
    let (code, out) =
        run("smoke.py", &[wrong.to_str().unwrap(), "--json", wrong_json.to_str().unwrap()], dir.path());
    assert_eq!(code, 1, "{out}");
    let failed: Vec<String> =
        smoke_rows(&wrong_json).into_iter().filter(|r| r.1 == "FAIL").map(|r| r.0).collect();
    assert_eq!(failed, ["prefill-0: page size", "decode-0: page size"], "{out}");

    // eval: the scoring, then the bundled questions.
    let (code, out) = run("eval.py", &["--self-check"], dir.path());
    assert_eq!(code, 0, "{out}");
    let eval_json = dir.path().join("gsm8k.json");
    let fixture = root().join("examples/kit/fixtures/gsm8k_tiny.jsonl");
    let (code, out) = run(
        "eval.py",
        &[
            f,
            "--dataset",
            fixture.to_str().unwrap(),
            "--concurrency",
            "2",
            "--max-tokens",
            "32",
            "--json",
            eval_json.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("gsm8k exact_match strict-match"), "{out}");
    let result = read_json(&eval_json);
    assert_eq!(result["n"], 5, "{result}");
    assert_eq!(result["errors"], 0, "{result}");
    for key in ["strict-match", "flexible-extract"] {
        let acc = result["exact_match"][key].as_f64().unwrap_or_else(|| panic!("{key}: {result}"));
        assert!((0.0..=1.0).contains(&acc), "{key} = {acc}");
    }
    let samples = result["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 5);
    assert!(samples.iter().all(|s| s["response"].as_str().is_some_and(|r| !r.is_empty())), "{result}");

    // agentx: 2 sessions × 2 turns through infera-bench replay. The second turns' think times
    // (30 s and 20 s in the trace) are capped to 0.1 s, so the run takes well under 20 s.
    let agentx_json = dir.path().join("agentx.json");
    let trace = root().join("examples/kit/fixtures/agentx_2sessions.jsonl");
    let (code, out) = run(
        "agentx.py",
        &[
            f,
            "--trace",
            trace.to_str().unwrap(),
            "--sessions",
            "2",
            "--max-turns",
            "2",
            "--concurrency",
            "2",
            "--think-cap-s",
            "0.1",
            "--bench",
            bench.to_str().unwrap(),
            "--json",
            agentx_json.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}");
    let report = read_json(&agentx_json);
    assert_eq!(report["completed"], 4, "{report}");
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["shaping"]["idle_gap_cap_s"], 0.1, "{report}");
    assert!(report["ttft_ms"]["p50"].as_f64().is_some_and(|v| v > 0.0), "{report}");
    assert!(report["itl_ms"]["p50"].as_f64().is_some_and(|v| v > 0.0), "{report}");
    assert!(report["window_s"].as_f64().is_some_and(|w| w < 15.0), "think times not capped: {report}");
    assert!(out.contains("TTFT ms") && out.contains("ITL ms") && out.contains("output tok/s"), "{out}");

    up.terminate();
    assert!(up.wait().success(), "{}", up.final_stderr());
    up.assert_children_gone();
}

//! `infera-launch up` with real SGLang 0.5.23 workers (the CPU example,
//! `examples/sglang_cpu_1p1d/deployment.toml`, with ports picked at run time): both workers
//! start, become healthy and are registered in etcd with what their engines run; a chat goes
//! through the proxy over the PD pair; SIGTERM stops everything, SGLang's own scheduler and
//! detokenizer processes included, and leaves no key in etcd.
//!
//! The venv and the tiny model come from `cargo xtask setup` (`INFERA_SGLANG_ENGINE_PYTHON`,
//! `INFERA_SGLANG_ENGINE_MODEL`, else where setup puts them).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use infera_testkit::EtcdServer;
use support::{Launch, etcd_workers, free_port, root, until_ok};

/// How long a real server may take to start here (≈ 20 s alone, much more beside a build).
const START: Duration = Duration::from_secs(240);

fn engine_python() -> PathBuf {
    std::env::var_os("INFERA_SGLANG_ENGINE_PYTHON")
        .map_or_else(|| root().join(".venv-sglang-engine/bin/python"), PathBuf::from)
}

fn engine_model() -> PathBuf {
    std::env::var_os("INFERA_SGLANG_ENGINE_MODEL")
        .map_or_else(|| root().join(".venv-sglang-engine/tiny-llama"), PathBuf::from)
}

/// The CPU example with free ports and absolute paths.
fn deployment(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("examples/sglang_cpu_1p1d/deployment.toml")).unwrap();
    let mut doc: toml::Table = toml::from_str(&text).unwrap();
    let python = engine_python();
    assert!(python.exists(), "{} not found: run `cargo xtask setup`", python.display());
    doc.insert("python".into(), python.display().to_string().into());
    doc["model"].as_table_mut().unwrap().insert("path".into(), engine_model().display().to_string().into());
    let pythonpath = root().join("testkit/sglang_cpu/pythonpath");
    doc["env"].as_table_mut().unwrap().insert("PYTHONPATH".into(), pythonpath.display().to_string().into());
    for role in ["prefill", "decode"] {
        let w = doc[role]["workers"].as_array_mut().unwrap()[0].as_table_mut().unwrap();
        w.insert("port".into(), free_port().into());
        if role == "prefill" {
            w.insert("bootstrap_port".into(), free_port().into());
            // Fixed ZMQ ports could collide with another test's; KV events are the PD tests'.
            w.remove("kv_events_port");
        }
    }
    let router = doc["router"].as_table_mut().unwrap();
    router.insert("listen".into(), "127.0.0.1:0".into());
    router.insert("metrics_listen".into(), "127.0.0.1:0".into());
    router.insert("proxies".into(), toml::Value::Array(vec!["127.0.0.1:0".into()]));
    router.insert("tokenizer".into(), engine_model().join("tokenizer.json").display().to_string().into());
    let path = dir.join("deployment.toml");
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    path
}

/// `pid` and every process below it, read from `/proc`.
fn descendants(pid: u32) -> BTreeSet<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces, so read after its last ')'.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut tree = BTreeSet::from([pid]);
    loop {
        let before = tree.len();
        let below: Vec<u32> =
            parents.iter().filter(|(_, parent)| tree.contains(parent)).map(|(p, _)| *p).collect();
        tree.extend(below);
        if tree.len() == before {
            return tree;
        }
    }
}

#[test]
fn up_starts_real_sglang_workers_registers_them_and_stops_them_clean() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path());
    let mut up = Launch::start_with(&file, START, &["--etcd", &url]);
    let ready = up
        .until_within("infera-launch ready", START * 2)
        .unwrap_or_else(|| panic!("never ready:\n{}", up.stderr()));
    let proxy = ready.split("proxies=http://").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();

    let workers = etcd_workers(&url);
    let keys: Vec<&str> = workers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["/infera/v1/workers/decode-0", "/infera/v1/workers/prefill-0"]);
    for (_, record) in &workers {
        assert!(record.contains(r#""page_size":16"#) && record.contains(r#""model":"tiny""#), "{record}");
    }

    let chat =
        r#"{"model":"tiny","messages":[{"role":"user","content":"hello"}],"stream":true,"max_tokens":8}"#;
    let (status, body) = until_ok(&proxy, "POST", "/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}\n{}", up.stderr());
    assert!(body.contains("[DONE]") && body.contains(r#""content""#), "{body}");

    // SGLang's own processes (scheduler, detokenizer) hang below each worker's.
    let sglang: Vec<u32> = up
        .pids
        .iter()
        .filter(|(name, _)| ["prefill-0", "decode-0"].contains(&name.as_str()))
        .map(|(_, pid)| *pid)
        .collect();
    assert_eq!(sglang.len(), 2, "{:?}", up.pids);
    let tree: BTreeSet<u32> = sglang.iter().flat_map(|pid| descendants(*pid)).collect();
    assert!(tree.len() > 2, "each worker runs SGLang's subprocesses: {tree:?}");

    up.terminate();
    let status = up.wait();
    let stderr = up.final_stderr();
    assert!(status.success(), "{status}:\n{stderr}");
    up.assert_children_gone();
    // Orphaned subprocesses die on their parent's death signal; give them the moment it takes.
    let end = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<u32> =
            tree.iter().copied().filter(|p| Path::new(&format!("/proc/{p}")).exists()).collect();
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < end, "processes of the workers still there: {left:?}\n{stderr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(etcd_workers(&url), [], "keys left behind");
}

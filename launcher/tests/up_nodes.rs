//! `infera-launch up` over several nodes: one file, checked whole on every node, and one
//! `up --only-host HOST --etcd URL` per node starting that node's workers; one node runs the
//! router, the others `--no-router`. Two "nodes" here are 127.0.0.1 and 127.0.0.2 (both
//! loopback), so the recipe of manual/guides/deploy_pd.md runs on one machine, with real etcd
//! and a request across them. And `up` refuses workers that belong to another node.
//!
//! Binaries: as in tests/up.rs (`INFERA_BIN_DIR`, else `<workspace>/target/debug`).

mod support;

use std::time::{Duration, Instant};

use infera_testkit::EtcdServer;
use support::{DEADLINE, Launch, deployment_on, etcd_workers, until_ok};

/// Polls etcd until the worker keys are `names` (registration follows health by a moment).
fn until_registered(url: &str, names: &[&str]) {
    let want: Vec<String> = names.iter().map(|n| format!("/infera/v1/workers/{n}")).collect();
    let end = Instant::now() + DEADLINE;
    loop {
        let keys: Vec<String> = etcd_workers(url).into_iter().map(|(k, _)| k).collect();
        if keys == want {
            return;
        }
        assert!(Instant::now() < end, "etcd holds {keys:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn started(up: &Launch) -> Vec<&str> {
    up.pids.iter().map(|(name, _)| name.as_str()).collect()
}

#[test]
fn each_node_starts_its_own_workers_and_one_runs_the_router() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let dir = tempfile::tempdir().unwrap();
    let file = deployment_on(dir.path(), None, ["127.0.0.1", "127.0.0.2"]);

    // The decode node: its worker only, registered; no control, no proxy.
    // Its worker is drained on stop; a short deadline, for it stops after the router is gone.
    let mut decode_node = Launch::start(
        &file,
        &["--etcd", &url, "--only-host", "127.0.0.2", "--no-router", "--drain-timeout-ms", "500"],
    );
    let ready =
        decode_node.until("infera-launch ready").unwrap_or_else(|| panic!("{}", decode_node.stderr()));
    assert_eq!(ready, "infera-launch ready workers=decode-0");
    assert_eq!(started(&decode_node), ["decode-0"]);
    assert!(
        decode_node.stderr().contains("--only-host 127.0.0.2: starting 1 of the file's 2 workers (decode-0)")
    );
    until_registered(&url, &["decode-0"]);

    // The prefill node runs the router, which finds the decode through etcd.
    let mut router_node = Launch::start(&file, &["--etcd", &url, "--only-host", "127.0.0.1"]);
    let ready =
        router_node.until("infera-launch ready").unwrap_or_else(|| panic!("{}", router_node.stderr()));
    assert_eq!(started(&router_node), ["prefill-0", "control", "proxy-0"]);
    until_registered(&url, &["decode-0", "prefill-0"]);
    let proxy = ready.split("proxies=http://").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
    let chat =
        r#"{"model":"glm-5.2","messages":[{"role":"user","content":"hello"}],"stream":true,"max_tokens":8}"#;
    let (status, body) = until_ok(&proxy, "POST", "/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}\n{}\n{}", router_node.stderr(), decode_node.stderr());
    assert!(body.contains("[DONE]"), "{body}");

    // Each node takes down, and deregisters, only what it started.
    router_node.terminate();
    assert!(router_node.wait().success(), "{}", router_node.stderr());
    router_node.assert_children_gone();
    assert_eq!(
        etcd_workers(&url).into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
        ["/infera/v1/workers/decode-0"]
    );
    decode_node.signal("INT");
    assert!(decode_node.wait().success(), "{}", decode_node.stderr());
    // No control answers its drain any more: it waits out the deadline, and says why.
    assert!(decode_node.stderr().contains("decode-0: drain deadline (500ms) passed without a report"));
    decode_node.assert_children_gone();
    assert_eq!(etcd_workers(&url), []);
}

/// `up` exits 64 before starting anything, with `needle` on stderr.
fn refused(file: &std::path::Path, extra: &[&str], needle: &str) {
    let mut up = Launch::start(file, extra);
    let status = up.wait();
    let stderr = up.final_stderr();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in:\n{stderr}");
    assert_eq!(up.until("infera-launch started"), None, "nothing starts");
}

#[test]
fn workers_of_other_nodes_are_refused_unless_selected() {
    let dir = tempfile::tempdir().unwrap();
    // 192.0.2.1 (TEST-NET-1) is no address of this machine.
    let file = deployment_on(dir.path(), None, ["127.0.0.1", "192.0.2.1"]);
    let path = file.display().to_string();
    refused(
        &file,
        &[],
        &format!(
            "{path} places workers on other nodes: decode-0 (host 192.0.2.1); `up` starts workers on the node \
             it runs on, so run `infera-launch up {path} --only-host HOST --etcd URL` on each node"
        ),
    );
    refused(&file, &["--only-host", "127.0.0.1"], "--only-host needs --etcd");
    refused(&file, &["--no-router"], "--no-router needs --etcd");
    refused(
        &file,
        &["--only-host", "10.9.9.9", "--etcd", "http://127.0.0.1:1"],
        "--only-host 10.9.9.9: no worker of",
    );
}

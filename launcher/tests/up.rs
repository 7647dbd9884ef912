//! `infera-launch up` end to end: the sim 1P1D example (ports chosen at run time) with real
//! etcd and with the static workers file; a request through the proxy; SIGTERM and SIGINT
//! leave no child process and no etcd key. And a worker that cannot start fails `up` with its
//! reason. (Several nodes, `--only-host`: tests/up_nodes.rs.)
//!
//! The infera-sim/control/proxy binaries come from `INFERA_BIN_DIR` (set by `cargo xtask
//! test`), else `<workspace>/target/debug` (`cargo test --workspace` builds them first).

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use infera_testkit::EtcdServer;
use support::{DEADLINE, Launch, deployment, etcd_workers, http, openssl_pki, until_ok};

/// Up → ready → a streamed chat through the proxy → `signal` (TERM, INT) → exit 0, nothing left.
fn serve_one_request_and_stop(etcd: Option<&EtcdServer>, state_dir: &Path, signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path(), None);
    let mut extra = vec!["--state-dir", state_dir.to_str().unwrap()];
    let url = etcd.map(EtcdServer::url);
    if let Some(url) = &url {
        extra = vec!["--etcd", url];
    }
    let mut up = Launch::start(&file, &extra);
    let ready = up.until("infera-launch ready").unwrap_or_else(|| panic!("never ready:\n{}", up.stderr()));
    let proxy = ready.split("proxies=http://").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
    assert_eq!(up.pids.len(), 4, "2 workers, control, proxy: {:?}", up.pids);

    let (status, models) = until_ok(&proxy, "GET", "/v1/models", "");
    assert_eq!(status, 200, "{models}\n{}", up.stderr());
    let chat =
        r#"{"model":"glm-5.2","messages":[{"role":"user","content":"hello"}],"stream":true,"max_tokens":8}"#;
    let (status, body) = until_ok(&proxy, "POST", "/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}\n{}", up.stderr());
    assert!(body.contains("[DONE]"), "{body}");

    match &url {
        Some(url) => {
            let workers = etcd_workers(url);
            let keys: Vec<&str> = workers.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["/infera/v1/workers/decode-0", "/infera/v1/workers/prefill-0"]);
            assert!(workers[0].1.contains(r#""dp_size":8"#), "{}", workers[0].1);
            assert!(workers[1].1.contains(r#""bootstrap_port":"#), "{}", workers[1].1);
        }
        None => {
            let text = std::fs::read_to_string(state_dir.join("workers.toml")).unwrap();
            assert!(text.contains("id = \"prefill-0\"") && text.contains("id = \"decode-0\""), "{text}");
        }
    }

    up.signal(signal);
    let status = up.wait();
    let stderr = up.final_stderr();
    assert!(status.success(), "{status}:\n{stderr}");
    assert!(stderr.contains(&format!("infera-launch: SIG{signal}: stopping")), "{stderr}");
    assert_eq!(up.until("infera-launch stopped").as_deref(), Some("infera-launch stopped"));
    up.assert_children_gone();
    assert!(http(&proxy, "GET", "/health", "").is_err(), "the proxy still answers");
    if let Some(url) = &url {
        assert_eq!(etcd_workers(url), [], "keys left behind");
    }
}

#[test]
fn up_with_etcd_serves_and_stops_clean() {
    let etcd = EtcdServer::start();
    let state = tempfile::tempdir().unwrap();
    serve_one_request_and_stop(Some(&etcd), state.path(), "TERM");
}

#[test]
fn up_with_a_static_workers_file_serves_and_stops_clean_on_sigint() {
    let state = tempfile::tempdir().unwrap();
    serve_one_request_and_stop(None, state.path(), "INT");
}

#[test]
fn a_worker_that_cannot_start_fails_up_with_its_reason() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = i64::from(taken.local_addr().unwrap().port());
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path(), Some(port));
    let mut up = Launch::start(&file, &["--restart", "never", "--state-dir", dir.path().to_str().unwrap()]);
    let status = up.wait();
    assert_eq!(status.code(), Some(1), "{}", up.stderr());
    let _ = up.until("infera-launch stopped");
    let err = up.final_stderr();
    assert!(err.contains("worker prefill-0 did not start"), "{err}");
    assert!(err.contains("exited before it was healthy"), "{err}");
    assert!(err.contains("cannot bind"), "the worker's own stderr is quoted: {err}");
    up.assert_children_gone();
}

#[test]
fn a_killed_worker_is_restarted_and_registered_again() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path(), None);
    let mut up = Launch::start(&file, &["--etcd", &url, "--restart-backoff-ms", "50"]);
    up.until("infera-launch ready").unwrap_or_else(|| panic!("never ready:\n{}", up.stderr()));
    let decode = up.pids.iter().find(|(name, _)| name == "decode-0").unwrap().1;
    assert!(Command::new("kill").args(["-KILL", &decode.to_string()]).status().unwrap().success());
    let again =
        up.until("infera-launch started decode-0").unwrap_or_else(|| panic!("no restart:\n{}", up.stderr()));
    assert_ne!(again, format!("infera-launch started decode-0 pid={decode}"));
    up.until("infera-launch healthy decode-0")
        .unwrap_or_else(|| panic!("not healthy again:\n{}", up.stderr()));
    let err = up.stderr();
    assert!(err.contains("decode-0: failed after") && err.contains("signal: 9"), "{err}");
    let end = Instant::now() + DEADLINE;
    while etcd_workers(&url).len() != 2 {
        assert!(Instant::now() < end, "decode-0 not registered again:\n{}", up.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    up.terminate();
    assert!(up.wait().success(), "{}", up.stderr());
    let _ = up.until("infera-launch stopped");
    up.assert_children_gone();
    assert_eq!(etcd_workers(&url), [], "keys left behind");
}

#[test]
fn up_reaches_control_over_mutual_tls_with_router_tls() {
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path(), None);
    let pki = openssl_pki(dir.path());
    let mut doc: toml::Table = toml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let path = |p: &Path| toml::Value::from(p.display().to_string());
    let tls = toml::Table::from_iter([
        ("cert".to_owned(), path(&pki.control.0)),
        ("key".to_owned(), path(&pki.control.1)),
        ("client_ca".to_owned(), path(&pki.ca)),
        ("ca".to_owned(), path(&pki.ca)),
        ("client_cert".to_owned(), path(&pki.client.0)),
        ("client_key".to_owned(), path(&pki.client.1)),
    ]);
    doc["router"].as_table_mut().unwrap().insert("tls".into(), toml::Value::Table(tls));
    std::fs::write(&file, toml::to_string(&doc).unwrap()).unwrap();

    let mut up = Launch::start(&file, &["--state-dir", dir.path().to_str().unwrap()]);
    let ready = up.until("infera-launch ready").unwrap_or_else(|| panic!("never ready:\n{}", up.stderr()));
    assert!(ready.contains(" control=https://127.0.0.1:"), "{ready}");
    let proxy = ready.split("proxies=http://").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
    let chat =
        r#"{"model":"glm-5.2","messages":[{"role":"user","content":"hello"}],"stream":true,"max_tokens":8}"#;
    let (status, body) = until_ok(&proxy, "POST", "/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}\n{}", up.stderr());
    assert!(body.contains("[DONE]"), "{body}");
    // Once the link is up, picks are control's (through mutual TLS), not local fallbacks.
    let fallbacks = || -> f64 {
        let (_, metrics) = http(&proxy, "GET", "/metrics", "").unwrap();
        metrics
            .lines()
            .filter(|l| l.starts_with("infera_proxy_fallback_picks_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let before = fallbacks();
    for _ in 0..3 {
        let (status, body) = http(&proxy, "POST", "/v1/chat/completions", chat).unwrap();
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(fallbacks(), before, "picks fell back to the proxy's list:\n{}", up.stderr());
    up.terminate();
    assert!(up.wait().success(), "{}", up.stderr());
    let _ = up.until("infera-launch stopped");
    up.assert_children_gone();
}

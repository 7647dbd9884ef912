//! `infera-launch up` end to end: the sim 1P1D example (ports chosen at run time) with real
//! etcd and with the static workers file; a request through the proxy; SIGTERM leaves no
//! child process and no etcd key. And a worker that cannot start fails `up` with its reason.
//!
//! The infera-sim/control/proxy binaries come from `INFERA_BIN_DIR` (set by `cargo xtask
//! test`), else `<workspace>/target/debug` (`cargo test --workspace` builds them first).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infera_registry::test_server::EtcdServer;

const DEADLINE: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn bin_dir() -> PathBuf {
    let dir = std::env::var_os("INFERA_BIN_DIR").map_or_else(|| root().join("target/debug"), PathBuf::from);
    for bin in ["infera-sim", "infera-control", "infera-proxy"] {
        assert!(
            dir.join(bin).is_file(),
            "{} is missing: run `cargo build -p infera-sim -p infera-control -p infera-proxy` (or `cargo \
             test --workspace`), or set INFERA_BIN_DIR",
            dir.join(bin).display()
        );
    }
    dir
}

fn free_port() -> i64 {
    i64::from(TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
}

/// The sim example with the workers' ports picked now and control/proxy on port 0.
fn deployment(dir: &Path, prefill_port: Option<i64>) -> PathBuf {
    let text = std::fs::read_to_string(root().join("examples/sim_1p1d/deployment.toml")).unwrap();
    let mut doc: toml::Table = toml::from_str(&text).unwrap();
    for (role, port) in [("prefill", prefill_port.unwrap_or_else(free_port)), ("decode", free_port())] {
        let workers = doc[role]["workers"].as_array_mut().unwrap();
        let w = workers[0].as_table_mut().unwrap();
        w.insert("port".into(), port.into());
        w.remove("kv_events_port");
        if role == "prefill" {
            w.insert("bootstrap_port".into(), free_port().into());
        }
    }
    let router = doc["router"].as_table_mut().unwrap();
    router.insert("listen".into(), "127.0.0.1:0".into());
    router.insert("metrics_listen".into(), "127.0.0.1:0".into());
    router.insert("proxies".into(), toml::Value::Array(vec!["127.0.0.1:0".into()]));
    let path = dir.join("deployment.toml");
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    path
}

/// A running `infera-launch up`, its stdout lines and its stderr.
struct Launch {
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// (name, pid) of every child started, in order.
    pids: Vec<(String, u32)>,
}

impl Launch {
    fn start(file: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_infera-launch"))
            .arg("up")
            .arg(file)
            .arg("--bin-dir")
            .arg(bin_dir())
            .args(["--health-timeout-ms", "30000", "--stop-timeout-ms", "5000"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { child, lines, stderr, pids: Vec::new() }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Reads stdout until a line starting with `prefix` (collecting child pids on the way).
    fn until(&mut self, prefix: &str) -> Option<String> {
        let end = Instant::now() + DEADLINE;
        while let Ok(line) = self.lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
            if let Some((name, pid)) =
                line.strip_prefix("infera-launch started ").and_then(|r| r.split_once(" pid="))
            {
                self.pids.push((name.to_owned(), pid.trim().parse().unwrap()));
            }
            if line.starts_with(prefix) {
                return Some(line);
            }
        }
        None
    }

    fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < end, "infera-launch did not exit:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every child pid is gone (or reused by something that is not ours).
    fn assert_children_gone(&self) {
        assert!(!self.pids.is_empty());
        for (_, pid) in &self.pids {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            assert!(
                !cmdline.contains("infera-"),
                "child {pid} ({cmdline}) is still there:\n{}",
                self.stderr()
            );
        }
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
            let _ = self.wait();
        }
    }
}

/// One HTTP/1.1 request; (status, body as text).
fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, out))
}

/// Polls until `method path` answers 200 (readiness with a deadline); the last response.
fn until_ok(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let end = Instant::now() + DEADLINE;
    loop {
        let r = http(addr, method, path, body).unwrap_or_else(|e| (0, e.to_string()));
        if r.0 == 200 || Instant::now() >= end {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn etcd_workers(url: &str) -> Vec<(String, String)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([url], None).await.unwrap();
        let opts = etcd_client::GetOptions::new().with_prefix();
        let r = c.get(infera_registry::keys::WORKERS, Some(opts)).await.unwrap();
        r.kvs()
            .iter()
            .map(|kv| (kv.key_str().unwrap().to_owned(), kv.value_str().unwrap().to_owned()))
            .collect()
    })
}

/// Up → ready → a streamed chat through the proxy → SIGTERM → exit 0, nothing left.
fn serve_one_request_and_stop(etcd: Option<&EtcdServer>, state_dir: &Path) {
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

    up.terminate();
    let status = up.wait();
    assert!(status.success(), "{status}:\n{}", up.stderr());
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
    serve_one_request_and_stop(Some(&etcd), state.path());
}

#[test]
fn up_with_a_static_workers_file_serves_and_stops_clean() {
    let state = tempfile::tempdir().unwrap();
    serve_one_request_and_stop(None, state.path());
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
    let err = up.stderr();
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

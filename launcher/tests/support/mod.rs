//! What the `infera-launch up` tests share: the sim example with ports picked at run time (the
//! kit's [`infera_testkit::ports`]), a running `up` read line by line, HTTP (the kit's client)
//! and etcd probes. Each test binary uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

pub(crate) fn bin_dir() -> PathBuf {
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

pub(crate) fn free_port() -> i64 {
    i64::from(infera_testkit::ports::free_port())
}

/// The sim example with the workers' ports picked now and control/proxy on port 0.
pub(crate) fn deployment(dir: &Path, prefill_port: Option<i64>) -> PathBuf {
    deployment_on(dir, prefill_port, ["127.0.0.1", "127.0.0.1"])
}

/// [`deployment`] with the prefill on `hosts[0]` and the decode on `hosts[1]`.
pub(crate) fn deployment_on(dir: &Path, prefill_port: Option<i64>, hosts: [&str; 2]) -> PathBuf {
    let text = std::fs::read_to_string(root().join("examples/sim_1p1d/deployment.toml")).unwrap();
    let mut doc: toml::Table = toml::from_str(&text).unwrap();
    let ports = [prefill_port.unwrap_or_else(free_port), free_port()];
    for ((role, port), host) in ["prefill", "decode"].into_iter().zip(ports).zip(hosts) {
        let workers = doc[role]["workers"].as_array_mut().unwrap();
        let w = workers[0].as_table_mut().unwrap();
        w.insert("port".into(), port.into());
        w.insert("host".into(), host.into());
        // Fixed ZMQ ports would collide between tests; the load sockets need the KV-event ones.
        w.remove("kv_events_port");
        w.remove("load_events");
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
pub(crate) struct Launch {
    pub(crate) child: Child,
    pub(crate) lines: Receiver<String>,
    pub(crate) stderr: Arc<Mutex<String>>,
    /// The thread copying stderr; it ends when `up` and every child holding the pipe are gone.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    /// (name, pid) of every child started, in order.
    pub(crate) pids: Vec<(String, u32)>,
}

impl Launch {
    pub(crate) fn start(file: &Path, extra: &[&str]) -> Self {
        Self::start_with(file, Duration::from_secs(30), extra)
    }

    /// [`Launch::start`] giving each worker `health` to answer `/health`.
    pub(crate) fn start_with(file: &Path, health: Duration, extra: &[&str]) -> Self {
        let health_ms = health.as_millis().to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_infera-launch"))
            .arg("up")
            .arg(file)
            .arg("--bin-dir")
            .arg(bin_dir())
            .args(["--health-timeout-ms", &health_ms, "--stop-timeout-ms", "5000"])
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
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { child, lines, stderr, stderr_reader: Some(stderr_reader), pids: Vec::new() }
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// All of stderr, once `up` has exited (waits for the copy to finish).
    pub(crate) fn final_stderr(&mut self) -> String {
        if let Some(reader) = self.stderr_reader.take() {
            reader.join().unwrap();
        }
        self.stderr()
    }

    /// Reads stdout until a line starting with `prefix` (collecting child pids on the way).
    pub(crate) fn until(&mut self, prefix: &str) -> Option<String> {
        self.until_within(prefix, DEADLINE)
    }

    /// [`Launch::until`] with a deadline of its own.
    pub(crate) fn until_within(&mut self, prefix: &str, deadline: Duration) -> Option<String> {
        let end = Instant::now() + deadline;
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

    pub(crate) fn terminate(&mut self) {
        self.signal("TERM");
    }

    /// Sends `up` a signal (`TERM`, `INT`).
    pub(crate) fn signal(&mut self, name: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args([&format!("-{name}"), &pid]).status().unwrap().success());
    }

    pub(crate) fn wait(&mut self) -> std::process::ExitStatus {
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
    pub(crate) fn assert_children_gone(&self) {
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

/// One HTTP/1.1 request with a JSON `body` (the kit's client, on a runtime of its own: these
/// tests block), answered within 30 s; (status, body as text).
pub(crate) fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let method =
        infera_testkit::http::Method::from_bytes(method.as_bytes()).map_err(std::io::Error::other)?;
    let url = format!("http://{addr}{path}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let answer = rt.block_on(async {
        let request = infera_testkit::http::request_bytes(method, &url, body.as_bytes().to_vec(), &[]);
        tokio::time::timeout(Duration::from_secs(30), request).await
    });
    match answer {
        Ok(Ok((status, text))) => Ok((status.as_u16(), text)),
        Ok(Err(e)) => Err(std::io::Error::other(format!("{e:#}"))),
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{url}: no answer in 30 s"))),
    }
}

/// Polls until `method path` answers 200 (readiness with a deadline); the last response.
pub(crate) fn until_ok(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let end = Instant::now() + DEADLINE;
    loop {
        let r = http(addr, method, path, body).unwrap_or_else(|e| (0, e.to_string()));
        if r.0 == 200 || Instant::now() >= end {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn etcd_workers(url: &str) -> Vec<(String, String)> {
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

/// A CA and two certificates it signed, made with the `openssl` command line as an operator
/// would: `control` (for 127.0.0.1) and `client` (a proxy's), each good as server and client.
pub(crate) struct Pki {
    pub(crate) ca: PathBuf,
    pub(crate) control: (PathBuf, PathBuf),
    pub(crate) client: (PathBuf, PathBuf),
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub(crate) fn openssl_pki(dir: &Path) -> Pki {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        dir,
        &[
            &["req", "-x509"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test-ca", "-days", "2"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    for name in ["control", "client"] {
        let (key, csr, pem) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"));
        let subject = format!("/CN={name}");
        openssl(dir, &[&["req"], &ec[..], &["-keyout", &key, "-out", &csr, "-subj", &subject]].concat());
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
        );
    }
    let pair = |name: &str| (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    Pki { ca: dir.join("ca.pem"), control: pair("control"), client: pair("client") }
}

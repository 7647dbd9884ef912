//! A rolling restart through `infera-launch` (the real binary, one `up --no-router` per
//! "node" on 127.0.0.2–5) of both workers of a 1P1D deployment, under 16 streaming clients:
//! a new prefill comes up, the old one's supervisor gets SIGTERM and drains (control takes it
//! out of new picks and reports what its ledger still holds; the worker stops at 0), then the
//! same for the decode. Nothing fails. With a drain deadline (and a stop grace) shorter than the
//! streams, the supervisor says how many it cut, and no more fail than that. An operator's
//! `Admin/DrainTarget` with `stop_when_drained` takes the same path, and the worker stays
//! stopped. Control and the proxy come from the test kit, following the same etcd
//! (manual/operations/rollouts.md).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use infera_testkit::http::{Method, request};
use infera_testkit::process::bin_dir;
use infera_testkit::{Cluster, ClusterSpec, ProxySpec, poll};
use serde_json::json;

const MODEL: &str = "m";
const CLIENTS: usize = 16;

/// The deployment file: four workers of one rank, each on a host of its own.
fn deployment(dir: &std::path::Path) -> std::path::PathBuf {
    let port = infera_testkit::ports::free_port;
    let worker = |name: &str, host: &str, gpu: u32, prefill: bool| {
        let bootstrap = if prefill { format!("bootstrap_port = {}\n", port()) } else { String::new() };
        format!("name = \"{name}\"\nhost = \"{host}\"\ngpus = [{gpu}]\nport = {}\n{bootstrap}", port())
    };
    let text = format!(
        "engine = \"sim\"\nsglang_version = \"0.5.23\"\n\n[model]\npath = \"{MODEL}\"\nnum_layers = 8\npage_size = 64\n\n\
         [transfer]\nbackend = \"mooncake\"\n\n[env]\nINFERA_SIM_SEED = \"7\"\nINFERA_SIM_SPEEDUP = \"5\"\n\n[prefill]\ntp = 1\n\n\
         [[prefill.workers]]\n{}\n[[prefill.workers]]\n{}\n[decode]\ntp = 1\n\n\
         [[decode.workers]]\n{}\n[[decode.workers]]\n{}\n[router]\ndecode_input_demand = \"on\"\n",
        worker("prefill-a", "127.0.0.2", 0, true),
        worker("prefill-b", "127.0.0.4", 2, true),
        worker("decode-a", "127.0.0.3", 1, false),
        worker("decode-b", "127.0.0.5", 3, false),
    );
    let path = dir.join("deployment.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// One node's `infera-launch up --no-router`, its stderr in a file.
struct Node {
    child: Child,
    stderr: std::path::PathBuf,
}

impl Node {
    /// Starts the node of `host` and waits (bounded) for its `infera-launch ready` line.
    fn start(file: &std::path::Path, etcd: &str, host: &str, drain_ms: u64) -> Self {
        Self::start_with(file, etcd, host, drain_ms, 5_000)
    }

    /// [`Node::start`] giving each worker `stop_ms` after SIGTERM before SIGKILL.
    fn start_with(file: &std::path::Path, etcd: &str, host: &str, drain_ms: u64, stop_ms: u64) -> Self {
        let stderr = file.with_file_name(format!("{host}.stderr"));
        let mut child = Command::new(bin_dir().join("infera-launch"))
            .args(["up", file.to_str().unwrap(), "--etcd", etcd, "--only-host", host, "--no-router"])
            .arg("--bin-dir")
            .arg(bin_dir())
            .args(["--drain-timeout-ms", &drain_ms.to_string(), "--stop-timeout-ms", &stop_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("infera-launch runs (cargo build -p infera-launcher)");
        let (tx, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let node = Self { child, stderr };
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.starts_with("infera-launch ready") => return node,
                Ok(_) => {}
                Err(_) => panic!("{host} not ready in 60 s:\n{}", node.log()),
            }
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// SIGTERM, as a rollout (or Kubernetes) stops the node, and waits (bounded) for its exit.
    async fn terminate(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let exited =
            poll(Duration::from_secs(60), "the node to exit", async || self.child.try_wait().unwrap()).await;
        let log = self.log();
        assert!(exited.expect(&log).success(), "{log}");
        log
    }
}

impl Drop for Node {
    /// A node a failed test left running stops as a rollout stops it.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            let _ = self.child.wait();
        }
    }
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// An answer that ended as a model ends one (its length, or a stop): not an error event, and not
/// SGLang's `abort` of a request its engine dropped.
fn whole(sse: &str) -> bool {
    let finished = sse.contains(r#""finish_reason":"length""#) || sse.contains(r#""finish_reason":"stop""#);
    finished && sse.trim_end().ends_with("data: [DONE]") && !sse.contains(r#""error""#)
}

/// `CLIENTS` clients streaming chats through a proxy, one after another, until stopped.
struct Clients {
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    running: Vec<tokio::task::JoinHandle<()>>,
}

/// What the clients saw, once stopped.
struct Seen {
    ok: u64,
    failed: u64,
}

impl Clients {
    /// Starts the clients, each asking for `max_tokens` through `proxy`.
    fn start(proxy: &str, max_tokens: u32) -> Self {
        let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
        let running = (0..CLIENTS)
            .map(|i| {
                let url = format!("{proxy}/v1/chat/completions");
                let (stop, tally) = (stop.clone(), tally.clone());
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let body = json!({"model": MODEL, "stream": true, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": format!("client {i}, question {n}")}]});
                        let answer = request(Method::POST, &url, Some(&body)).await;
                        match answer {
                            Ok((status, text)) if status == 200 && whole(&text) => {
                                tally.ok.fetch_add(1, Ordering::Relaxed);
                            }
                            other => {
                                tally.failed.fetch_add(1, Ordering::Relaxed);
                                eprintln!("client {i}: {other:?}");
                            }
                        }
                    }
                })
            })
            .collect();
        Self { stop, tally, running }
    }

    /// Whole answers so far.
    fn answered(&self) -> u64 {
        self.tally.ok.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until the clients have had `CLIENTS` more whole answers than `before`.
    async fn answered_since(&self, before: u64, what: &str) {
        poll(Duration::from_secs(30), what, async || {
            (self.answered() >= before + CLIENTS as u64).then_some(())
        })
        .await
        .unwrap();
    }

    /// Stops the clients after their current request, and what they saw.
    async fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.running {
            c.await.unwrap();
        }
        Seen { ok: self.tally.ok.load(Ordering::Relaxed), failed: self.tally.failed.load(Ordering::Relaxed) }
    }
}

/// Waits (bounded) until control routes to exactly `workers`.
async fn serving(cluster: &Cluster, workers: &[&str]) {
    poll(Duration::from_secs(30), "control to route to the new set of workers", async || {
        let mut now: Vec<String> = cluster
            .control
            .targets()
            .await
            .iter()
            .map(|t| t.target.as_ref().unwrap().worker_id.clone())
            .collect();
        now.sort();
        (now == workers).then_some(())
    })
    .await
    .unwrap();
}

/// Waits (bounded) until control's ledger holds at least `n` requests on `worker`: a drain
/// now has something to wait for.
async fn holding(cluster: &Cluster, worker: &str, n: u64) {
    poll(Duration::from_secs(30), "requests in flight on the worker", async || {
        let targets = cluster.control.targets().await;
        let held: u64 = targets
            .iter()
            .filter(|t| t.target.as_ref().unwrap().worker_id == worker)
            .map(|t| t.held_requests)
            .sum();
        (held >= n).then_some(())
    })
    .await
    .unwrap();
}

async fn deployment_under_load() -> (Cluster, tempfile::TempDir, std::path::PathBuf) {
    let spec =
        ClusterSpec { etcd: Some(Duration::from_secs(10)), proxies: 0, ..ClusterSpec::new(MODEL, vec![]) };
    let cluster = spec.start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path());
    (cluster, dir, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_both_workers_under_16_streams_fails_nothing() {
    let (cluster, _dir, file) = deployment_under_load().await;
    let etcd = cluster.etcd.as_ref().unwrap().url();
    let prefill_a = Node::start(&file, &etcd, "127.0.0.2", 30_000);
    let decode_a = Node::start(&file, &etcd, "127.0.0.3", 30_000);
    serving(&cluster, &["decode-a", "prefill-a"]).await;
    let mut proxy = ProxySpec::new(cluster.control.url()).start().await.unwrap();
    proxy.wait_ready(MODEL).await.unwrap();
    let clients = Clients::start(&proxy.url, 200);

    let prefill_b = Node::start(&file, &etcd, "127.0.0.4", 30_000);
    serving(&cluster, &["decode-a", "prefill-a", "prefill-b"]).await;
    holding(&cluster, "prefill-a", 1).await;
    let log = prefill_a.terminate().await;
    assert!(log.contains("prefill-a: drained in"), "{log}");
    let decode_b = Node::start(&file, &etcd, "127.0.0.5", 30_000);
    serving(&cluster, &["decode-a", "decode-b", "prefill-b"]).await;
    let before = clients.answered();
    holding(&cluster, "decode-a", 2).await;
    let log = decode_a.terminate().await;
    assert!(log.contains("decode-a: drained in"), "{log}");
    // Serving on the new pair.
    clients.answered_since(before, "answers after the rollout").await;
    let Seen { ok, failed } = clients.stop().await;
    eprintln!("rolling restart: {ok} streams answered, {failed} failed");
    assert_eq!(failed, 0, "a drained rollout loses nothing");
    assert!(ok >= 2 * CLIENTS as u64, "{ok}");
    proxy.stop().await.unwrap();
    cluster.ledger_returns_to_zero().await.unwrap();
    // While control still answers their drains.
    prefill_b.terminate().await;
    decode_b.terminate().await;
    cluster.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_deadline_shorter_than_the_streams_says_how_many_it_cut() {
    let (cluster, _dir, file) = deployment_under_load().await;
    let etcd = cluster.etcd.as_ref().unwrap().url();
    let prefill_a = Node::start(&file, &etcd, "127.0.0.2", 30_000);
    // 200 ms to drain, and 200 ms after SIGTERM: the engine's own graceful stop (SGLang's, which
    // the sim follows, finishes what it runs) has no time either.
    let decode_a = Node::start_with(&file, &etcd, "127.0.0.3", 200, 200);
    let decode_b = Node::start(&file, &etcd, "127.0.0.5", 30_000);
    serving(&cluster, &["decode-a", "decode-b", "prefill-a"]).await;
    let mut proxy = ProxySpec::new(cluster.control.url()).start().await.unwrap();
    proxy.wait_ready(MODEL).await.unwrap();
    // Long answers: every stream on decode-a outlasts its drain and its stop.
    let clients = Clients::start(&proxy.url, 400);
    holding(&cluster, "decode-a", 2).await;
    let log = decode_a.terminate().await;
    let cut: u64 = log
        .split("drain deadline (200ms) passed with ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no cut count in the log:\n{log}"));
    let failed = clients.stop().await.failed;
    eprintln!("drain deadline 200 ms: {cut} streams cut by the supervisor, {failed} failed at the clients");
    assert!(cut >= 2, "{log}");
    assert!((1..=cut).contains(&failed), "{failed} failed, {cut} cut\n{log}");
    proxy.stop().await.unwrap();
    cluster.ledger_returns_to_zero().await.unwrap();
    // While control still answers their drains.
    prefill_a.terminate().await;
    decode_b.terminate().await;
    cluster.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_drain_with_stop_drains_and_stops_the_worker_and_fails_nothing() {
    let (cluster, _dir, file) = deployment_under_load().await;
    let etcd = cluster.etcd.as_ref().unwrap().url();
    let prefill_a = Node::start(&file, &etcd, "127.0.0.2", 30_000);
    let decode_a = Node::start(&file, &etcd, "127.0.0.3", 30_000);
    let decode_b = Node::start(&file, &etcd, "127.0.0.5", 30_000);
    serving(&cluster, &["decode-a", "decode-b", "prefill-a"]).await;
    let mut proxy = ProxySpec::new(cluster.control.url()).start().await.unwrap();
    proxy.wait_ready(MODEL).await.unwrap();
    let clients = Clients::start(&proxy.url, 200);
    holding(&cluster, "decode-a", 2).await;
    // The operator's call: the same path as SIGTERM to the worker's launcher, which then
    // keeps the worker stopped.
    let ask = infera_proto::pb::DrainTargetRequest {
        worker_id: "decode-a".into(),
        dp_rank: None,
        stop_when_drained: true,
    };
    cluster.control.admin().await.drain_target(ask).await.unwrap();
    serving(&cluster, &["decode-b", "prefill-a"]).await;
    let log = poll(Duration::from_secs(60), "decode-a's launcher to stop it", async || {
        let log = decode_a.log();
        log.contains("decode-a: retired").then_some(log)
    })
    .await
    .unwrap();
    assert!(log.contains("decode-a: Admin/DrainTarget asked to drain and stop it"), "{log}");
    assert!(log.contains("decode-a: drained in"), "{log}");
    for line in log
        .lines()
        .filter(|l| l.contains("asked to drain") || l.contains("drained in") || l.contains("retired"))
    {
        eprintln!("{line}");
    }
    // Serving on decode-b alone.
    let before = clients.answered();
    clients.answered_since(before, "answers after the stop").await;
    let Seen { ok, failed } = clients.stop().await;
    eprintln!("operator's drain with stop: {ok} streams answered, {failed} failed");
    assert_eq!(failed, 0, "a drained stop loses nothing");
    proxy.stop().await.unwrap();
    cluster.ledger_returns_to_zero().await.unwrap();
    // The launcher stays up without its worker, and stops cleanly.
    let log = decode_a.terminate().await;
    assert_eq!(log.matches("decode-a: starting:").count(), 1, "not restarted:\n{log}");
    prefill_a.terminate().await;
    decode_b.terminate().await;
    cluster.stop().await.unwrap();
}

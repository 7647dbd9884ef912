//! A whole deployment on loopback, in one process: control, proxies and sim workers, each on
//! a port-0 listener bound before anything starts, so nothing waits on a fixed port or a sleep.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use http::StatusCode;
use infera_proto::pb::{self, admin_client::AdminClient};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub(crate) use crate::client::*;

/// Sim time compression: a 40 ms decode step takes 2 ms.
pub(crate) const SPEEDUP: &str = "20";
pub(crate) const MODEL: &str = "m";

/// A server task stopped on drop.
pub(crate) struct Task {
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Task {
    fn spawn<F>(run: impl FnOnce(oneshot::Receiver<()>) -> F) -> Self
    where
        F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        Self { stop: Some(stop), handle: Some(tokio::spawn(run(stopped))) }
    }

    async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.expect("task panicked").expect("task failed");
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if let Some(h) = &self.handle {
            h.abort();
        }
    }
}

async fn until(rx: oneshot::Receiver<()>) {
    let _ = rx.await;
}

/// One sim worker.
pub(crate) struct Sim {
    pub(crate) url: String,
    pub(crate) bootstrap_port: Option<u16>,
    task: Task,
}

impl Sim {
    pub(crate) async fn start(mode: &str, dp: u32, extra: &[&str]) -> Self {
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = http.local_addr().unwrap();
        let bootstrap =
            if mode == "prefill" { Some(TcpListener::bind("127.0.0.1:0").await.unwrap()) } else { None };
        let bootstrap_port = bootstrap.as_ref().map(|l| l.local_addr().unwrap().port());
        let port = addr.port().to_string();
        let bport = bootstrap_port.unwrap_or(8998).to_string();
        let dp = dp.to_string();
        let mut argv = vec![
            "infera-sim",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--model-path",
            "/models/m",
            "--served-model-name",
            MODEL,
            "--disaggregation-mode",
            mode,
            "--disaggregation-bootstrap-port",
            &bport,
            "--dp-size",
            &dp,
            "--enable-dp-attention",
            "--sim-seed",
            "11",
            "--sim-speedup",
            SPEEDUP,
        ];
        argv.extend_from_slice(extra);
        let config =
            infera_sim::SimConfig::try_from(infera_sim::SimArgs::try_parse_from(argv).unwrap()).unwrap();
        let listeners = infera_sim::Listeners { http, bootstrap };
        let task = Task::spawn(move |rx| infera_sim::run(listeners, config, until(rx)));
        Self { url: format!("http://{addr}"), bootstrap_port, task }
    }

    /// The sim's log of data-plane requests.
    pub(crate) async fn requests(&self) -> Vec<Value> {
        let (status, body) = get(&format!("{}/sim/requests", self.url)).await;
        assert_eq!(status, StatusCode::OK);
        let v: Value = serde_json::from_str(&body).unwrap();
        v.as_array().cloned().or_else(|| v["requests"].as_array().cloned()).unwrap_or_default()
    }

    /// Sets fault knobs.
    pub(crate) async fn faults(&self, faults: Value) {
        let (status, body) = post_json(&format!("{}/sim/faults", self.url), &faults, &[]).await;
        assert!(status.is_success(), "{status} {body}");
    }
}

/// Control + proxies + sims.
pub(crate) struct Cluster {
    pub(crate) control_addr: SocketAddr,
    pub(crate) proxies: Vec<String>,
    pub(crate) prefill: Option<Sim>,
    pub(crate) decode: Sim,
    control: Task,
    proxy_tasks: Vec<Task>,
    control_flags: Vec<&'static str>,
    _workers: tempfile::NamedTempFile,
}

/// The deployment shape.
pub(crate) struct Shape {
    pub(crate) pd: bool,
    pub(crate) decode_dp: u32,
    pub(crate) prefill_dp: u32,
    pub(crate) proxies: usize,
    pub(crate) control_flags: Vec<&'static str>,
    /// Extra flags of every proxy.
    pub(crate) proxy_flags: Vec<&'static str>,
    /// Extra flags of the prefill sim.
    pub(crate) prefill_flags: Vec<String>,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            pd: true,
            decode_dp: 4,
            prefill_dp: 1,
            proxies: 2,
            control_flags: vec!["--decode-input-demand", "on"],
            proxy_flags: Vec::new(),
            prefill_flags: Vec::new(),
        }
    }
}

impl Cluster {
    pub(crate) async fn start(shape: Shape) -> Self {
        let prefill_flags: Vec<&str> = shape.prefill_flags.iter().map(String::as_str).collect();
        let prefill =
            if shape.pd { Some(Sim::start("prefill", shape.prefill_dp, &prefill_flags).await) } else { None };
        let decode = Sim::start(if shape.pd { "decode" } else { "null" }, shape.decode_dp, &[]).await;
        let mut toml = String::new();
        if let Some(p) = &prefill {
            toml += &format!(
                "[[workers]]\nid='prefill-0'\nrole='prefill'\nurl='{}'\nmodel='{MODEL}'\nbootstrap_port={}\ndp_size={}\n",
                p.url,
                p.bootstrap_port.unwrap(),
                shape.prefill_dp
            );
        }
        let role = if shape.pd { "decode" } else { "mixed" };
        toml += &format!(
            "[[workers]]\nid='decode-0'\nrole='{role}'\nurl='{}'\nmodel='{MODEL}'\ndp_size={}\n",
            decode.url, shape.decode_dp
        );
        let workers = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(workers.path(), toml).unwrap();

        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let control_addr = grpc.local_addr().unwrap();
        let control = start_control(grpc, &workers, &shape.control_flags).await;

        let mut proxies = Vec::new();
        let mut proxy_tasks = Vec::new();
        for _ in 0..shape.proxies {
            let (addr, task) = start_proxy(control_addr, &shape.proxy_flags).await;
            proxies.push(addr);
            proxy_tasks.push(task);
        }
        let cluster = Self {
            control_addr,
            proxies,
            prefill,
            decode,
            control,
            proxy_tasks,
            control_flags: shape.control_flags,
            _workers: workers,
        };
        for p in &cluster.proxies {
            wait_ready(p).await;
        }
        cluster
    }

    pub(crate) async fn admin(&self) -> AdminClient<tonic::transport::Channel> {
        AdminClient::connect(format!("http://{}", self.control_addr)).await.unwrap()
    }

    /// Every pick control makes from now on (`Admin/WatchDecisions`, all kinds and models).
    pub(crate) async fn decisions(&self) -> tonic::Streaming<pb::DecisionEvent> {
        self.admin().await.watch_decisions(pb::WatchDecisionsRequest::default()).await.unwrap().into_inner()
    }

    /// Held requests and booked tokens summed over every target.
    pub(crate) async fn ledger(&self) -> (u64, u64) {
        let rows =
            self.admin().await.list_targets(pb::ListTargetsRequest::default()).await.unwrap().into_inner();
        rows.targets.iter().fold((0, 0), |(h, t), r| (h + r.held_requests, t + r.booked_input_tokens))
    }

    /// Waits (bounded) until the ledger is back to exactly zero.
    pub(crate) async fn ledger_returns_to_zero(&self) {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let l = self.ledger().await;
            if l == (0, 0) {
                let res = self
                    .admin()
                    .await
                    .list_reservations(pb::ListReservationsRequest::default())
                    .await
                    .unwrap();
                assert!(res.into_inner().reservations.is_empty());
                return;
            }
            if Instant::now() > end {
                let res = self
                    .admin()
                    .await
                    .list_reservations(pb::ListReservationsRequest::default())
                    .await
                    .unwrap();
                let left: Vec<String> = res
                    .into_inner()
                    .reservations
                    .iter()
                    .take(20)
                    .map(|r| {
                        format!("{} kind={} {:?} tokens={}", r.request_id, r.kind, r.target, r.input_tokens)
                    })
                    .collect();
                let mut logs = Vec::new();
                for sim in self.prefill.iter().chain(std::iter::once(&self.decode)) {
                    for r in sim.requests().await {
                        if left.iter().any(|l| l.starts_with(r["rid"].as_str().unwrap_or("-"))) {
                            logs.push(r.to_string());
                        }
                    }
                }
                let mut metrics = Vec::new();
                for p in &self.proxies {
                    let (_, text) = get(&format!("{p}/metrics")).await;
                    metrics.extend(
                        text.lines()
                            .filter(|l| {
                                !l.starts_with('#')
                                    && (l.contains("releases")
                                        || l.contains("control_errors")
                                        || l.contains("requests_total")
                                        || l.contains("inflight")
                                        || l.contains("fallback"))
                            })
                            .map(str::to_owned),
                    );
                }
                panic!(
                    "ledger not back to zero: {l:?}; left (first 20): {left:#?}; proxy metrics: {metrics:#?}; sim logs: {} entries",
                    logs.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn stop_control(&mut self) {
        self.control.stop().await;
    }

    /// Starts a new control (a new instance: no leases, no reservations) on the old address.
    pub(crate) async fn restart_control(&mut self) {
        self.control.stop().await;
        let grpc = TcpListener::bind(self.control_addr).await.expect("the old control address is free again");
        self.control = start_control(grpc, &self._workers, &self.control_flags).await;
    }

    pub(crate) async fn stop(mut self) {
        for t in &mut self.proxy_tasks {
            t.stop().await;
        }
        self.control.stop().await;
        if let Some(p) = &mut self.prefill {
            p.task.stop().await;
        }
        self.decode.task.stop().await;
    }
}

pub(crate) async fn start_control(
    grpc: TcpListener,
    workers: &tempfile::NamedTempFile,
    flags: &[&str],
) -> Task {
    let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut argv = vec!["infera-control", "--workers", workers.path().to_str().unwrap(), "--seed", "3"];
    argv.extend_from_slice(flags);
    let config =
        infera_control::Config::try_from(infera_control::Args::try_parse_from(argv).unwrap()).unwrap();
    let listeners = infera_control::Listeners { grpc, metrics };
    Task::spawn(move |rx| infera_control::run(listeners, config, until(rx)))
}

/// Starts an in-process proxy against control at `control` with extra flags.
pub(crate) async fn start_proxy(control: SocketAddr, flags: &[&str]) -> (String, Task) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let url = format!("http://{control}");
    let mut argv = vec!["infera-proxy", "--control", &url, "--targets-refresh-ms", "200"];
    // A debug build on a loaded 2-core CI machine can take longer than the 50 ms default to answer a
    // pick; tests that are not about the deadline must not see fallbacks, so they get a wide one.
    if !flags.contains(&"--pick-timeout-ms") {
        argv.extend_from_slice(&["--pick-timeout-ms", "2000"]);
    }
    argv.extend_from_slice(flags);
    let config = infera_proxy::Config::try_from(infera_proxy::Args::try_parse_from(argv).unwrap()).unwrap();
    let task = Task::spawn(move |rx| infera_proxy::run(listener, config, until(rx)));
    (addr, task)
}

/// Waits until a proxy holds a lease and knows the targets.
pub(crate) async fn wait_ready(proxy: &str) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = get(&format!("{proxy}/v1/models")).await;
        if status == StatusCode::OK && body.contains(&format!("\"id\":\"{MODEL}\"")) {
            let (ready, _) = get(&format!("{proxy}/readiness")).await;
            if ready == StatusCode::OK {
                return;
            }
        }
        assert!(Instant::now() < end, "proxy {proxy} not ready: {status} {body}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

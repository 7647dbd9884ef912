//! A whole deployment on loopback, in one process, started with the workspace's test kit
//! (`infera-testkit`): control, proxies and sim workers, each on a port-0 listener bound before
//! anything starts, so nothing waits on a fixed port or a sleep.

use std::net::SocketAddr;

use infera_proto::pb::{self, admin_client::AdminClient};
use infera_testkit::{ClusterSpec, ControlSpec, ProxySpec, SimSpec, Workers};

pub(crate) use crate::client::*;
pub(crate) use infera_testkit::{Ledger, Proxy, Sim, eventually};

/// Sim time compression: a 40 ms decode step takes 2 ms.
pub(crate) const SPEEDUP: f64 = 20.0;
pub(crate) const MODEL: &str = "m";

/// A sim of `role` as every test here runs it: model `m`, seed 11, 20× time compression.
pub(crate) fn sim(spec: SimSpec) -> SimSpec {
    spec.seed(11).speedup(SPEEDUP)
}

/// Control + proxies + sims.
pub(crate) struct Cluster {
    pub(crate) control_addr: SocketAddr,
    pub(crate) proxies: Vec<String>,
    kit: infera_testkit::Cluster,
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
    /// Extra flags of the decode (or mixed) sim.
    pub(crate) decode_flags: Vec<String>,
    /// The API key the proxies' readiness probe shows (proxies with `--api-keys`).
    pub(crate) proxy_api_key: Option<String>,
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
            decode_flags: Vec::new(),
            proxy_api_key: None,
        }
    }
}

impl Cluster {
    pub(crate) async fn start(shape: Shape) -> Self {
        let mut sims = Vec::new();
        if shape.pd {
            // One prefill with DP ranks: the rank follows the bootstrap room, as SGLang's does.
            let prefill = SimSpec::prefill("prefill-0", MODEL).ranks(shape.prefill_dp);
            sims.push(sim(prefill).extra(shape.prefill_flags.iter().cloned()));
            let decode = SimSpec::decode("decode-0", MODEL, shape.decode_dp);
            sims.push(sim(decode).extra(shape.decode_flags.iter().cloned()));
        } else {
            let mixed = SimSpec::mixed("decode-0", MODEL, shape.decode_dp);
            sims.push(sim(mixed).extra(shape.decode_flags.iter().cloned()));
        }
        let mut spec = ClusterSpec::new(MODEL, sims);
        spec.control = ControlSpec::new(Workers::None).flags(shape.control_flags.iter().copied());
        spec.control.seed = Some(3);
        spec.proxies = shape.proxies;
        spec.proxy_flags = shape.proxy_flags.iter().map(|f| (*f).to_owned()).collect();
        spec.proxy_api_key = shape.proxy_api_key;
        let kit = spec.start().await.expect("the cluster starts");
        Self { control_addr: kit.control.addr, proxies: kit.proxy_urls(), kit }
    }

    /// The prefill sim of a PD cluster.
    pub(crate) fn prefill(&self) -> Option<&Sim> {
        self.kit.sims.iter().find(|s| s.record.id.as_str() == "prefill-0")
    }

    /// The decode (or mixed) sim.
    pub(crate) fn decode(&self) -> &Sim {
        self.kit.sim("decode-0")
    }

    pub(crate) async fn admin(&self) -> AdminClient<tonic::transport::Channel> {
        self.kit.control.admin().await
    }

    /// Every pick control makes from now on (`Admin/WatchDecisions`, all kinds and models).
    pub(crate) async fn decisions(&self) -> tonic::Streaming<pb::DecisionEvent> {
        self.admin().await.watch_decisions(pb::WatchDecisionsRequest::default()).await.unwrap().into_inner()
    }

    /// Control's `/metrics` text.
    pub(crate) async fn control_metrics(&self) -> String {
        self.kit.control.metrics().await.unwrap()
    }

    /// Held requests and booked tokens summed over every target.
    pub(crate) async fn ledger(&self) -> Ledger {
        self.kit.control.ledger().await
    }

    /// Waits (bounded) until the ledger is back to exactly zero.
    pub(crate) async fn ledger_returns_to_zero(&self) {
        if let Err(e) = self.kit.ledger_returns_to_zero().await {
            let mut metrics = Vec::new();
            for p in &self.proxies {
                let (_, text) = get(&format!("{p}/metrics")).await;
                let wanted = ["releases", "control_errors", "requests_total", "inflight", "fallback"];
                metrics.extend(
                    text.lines()
                        .filter(|l| !l.starts_with('#') && wanted.iter().any(|w| l.contains(w)))
                        .map(str::to_owned),
                );
            }
            panic!("{e:#}; proxy metrics: {metrics:#?}");
        }
    }

    pub(crate) async fn stop_control(&mut self) {
        self.kit.control.stop().await.unwrap();
    }

    /// Starts a new control (a new instance: no leases, no reservations) on the old address.
    pub(crate) async fn restart_control(&mut self) {
        self.kit.control.restart(false).await.expect("control restarts on its address");
    }

    pub(crate) async fn stop(self) {
        self.kit.stop().await.unwrap();
    }
}

/// An in-process control over `workers` with extra flags, once every worker is routable (their
/// `/server_info` answered).
pub(crate) async fn start_control(
    workers: Vec<infera_proto::types::WorkerRecord>,
    flags: &[&str],
) -> infera_testkit::Control {
    let targets = workers.iter().map(|w| w.dp_size as usize).sum();
    let mut spec = ControlSpec::new(Workers::Records(workers)).flags(flags.iter().copied());
    spec.seed = Some(3);
    let control = spec.start().await.unwrap();
    control.wait_targets(targets).await.unwrap();
    control
}

/// An in-process proxy against control at `control` with extra flags.
pub(crate) async fn start_proxy(control: SocketAddr, flags: &[&str]) -> Proxy {
    ProxySpec::new(format!("http://{control}")).flags(flags.iter().copied()).start().await.unwrap()
}

/// A proxy process against control at `control` with extra flags (not yet ready).
pub(crate) async fn spawn_proxy(control: SocketAddr, flags: &[&str]) -> Proxy {
    ProxySpec::new(format!("http://{control}")).flags(flags.iter().copied()).spawn().await.unwrap()
}

/// Waits until a proxy holds a lease and knows the targets.
pub(crate) async fn wait_ready(proxy: &Proxy) {
    proxy.wait_ready(MODEL).await.unwrap();
}

//! The failover bench's deployment, every socket on port 0, started with the workspace's test
//! kit (`infera-testkit`): a real etcd; a 1P1D pair of sims in this process (one prefill, one
//! decode with attention-DP ranks) registered in it under leases, as the launcher's registrar
//! does; `replicas` `infera-control` processes electing a leader through it; the proxies, in
//! this process, with `--control` naming every replica; and, beside them, one standalone
//! `infera-control` process (no etcd, a static workers file of the same two sims) — the
//! baseline of the pick latency.

use std::time::Duration;

use anyhow::Context as _;
use infera_proto::pb;
use infera_testkit::{
    Control, ControlSpec, EtcdServer, Proxy, ProxySpec, Registration, Replicas, Sim, SimSpec, Workers,
};

/// The served model name.
pub(crate) const MODEL: &str = "m";
/// The workers' etcd lease TTL (the launcher's registrar renews it).
const WORKER_LEASE_TTL: Duration = Duration::from_secs(10);

/// What to start.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) replicas: usize,
    pub(crate) proxies: usize,
    pub(crate) decode_ranks: u32,
    /// The sims' `--sim-speedup`.
    pub(crate) speedup: f64,
    /// Every control's `--leader-lease-ttl-secs`.
    pub(crate) leader_lease_ttl_secs: u64,
    /// Every proxy's `--pick-timeout-ms`.
    pub(crate) pick_timeout_ms: u64,
    /// The sims' seed.
    pub(crate) seed: u64,
}

/// A running deployment.
#[derive(Debug)]
pub(crate) struct Deployment {
    /// The decode sim (its `/v1/loads` is what the ledger should hold).
    pub(crate) decode: Sim,
    prefill: Sim,
    registrations: Vec<Registration>,
    /// The replica set.
    pub(crate) replicas: Replicas,
    /// The proxies, each with `--control` = every replica.
    pub(crate) proxies: Vec<Proxy>,
    /// The standalone control over the same sims.
    pub(crate) standalone: Control,
    /// Kept last: dropped (killed) after everything that talks to it.
    _etcd: EtcdServer,
}

/// The control flags of every replica and of the standalone control.
fn control_flags(spec: &Spec) -> Vec<String> {
    let ttl = spec.leader_lease_ttl_secs.to_string();
    ["--decode-input-demand", "on", "--leader-lease-ttl-secs", &ttl].map(str::to_owned).into()
}

impl Deployment {
    /// Starts everything and waits (bounded) until a leader is elected and every proxy routes.
    pub(crate) async fn start(spec: &Spec) -> anyhow::Result<Self> {
        let etcd = tokio::task::spawn_blocking(EtcdServer::start).await.context("etcd does not start")?;
        let sim = |s: SimSpec| {
            s.model_path(MODEL).seed(spec.seed).speedup(spec.speedup).sim_flag("--sim-log", "warn")
        };
        let prefill = sim(SimSpec::prefill("prefill-0", MODEL)).start().await?;
        let decode = sim(SimSpec::decode("decode-0", MODEL, spec.decode_ranks)).start().await?;
        let registrations = [&prefill, &decode]
            .iter()
            .map(|s| Registration::start(vec![etcd.url()], s.record.clone(), WORKER_LEASE_TTL))
            .collect();

        let flags = control_flags(spec);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let replicas = Replicas::start(&etcd.url(), spec.replicas, &flags, false).await?;
        let leader = replicas.wait_leader(None).await?;
        // The leader lists both workers (read from etcd) before a proxy asks for targets.
        let leader_control = &replicas.controls[leader];
        infera_testkit::poll(Duration::from_secs(30), "the leader to list both workers", async || {
            let n = leader_control
                .admin()
                .await
                .list_targets(pb::ListTargetsRequest::default())
                .await
                .ok()?
                .into_inner();
            (n.targets.len() == 1 + spec.decode_ranks as usize).then_some(())
        })
        .await?;

        let mut proxies = Vec::new();
        for _ in 0..spec.proxies {
            let proxy = ProxySpec::new(replicas.urls()).flag("--pick-timeout-ms", spec.pick_timeout_ms);
            proxies.push(proxy.start().await?);
        }
        for p in &proxies {
            p.wait_ready(MODEL).await?;
        }

        let records = vec![prefill.record.clone(), decode.record.clone()];
        let standalone =
            ControlSpec::new(Workers::Records(records)).flags(control_flags(spec)).spawn().await?;
        Ok(Self { decode, prefill, registrations, replicas, proxies, standalone, _etcd: etcd })
    }

    /// The proxies' base URLs.
    pub(crate) fn proxy_urls(&self) -> Vec<String> {
        self.proxies.iter().map(|p| p.url.clone()).collect()
    }

    /// Stops every part gracefully, in order: the proxies (closing their leases), the controls,
    /// the registrations, the sims; etcd last.
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        for p in &mut self.proxies {
            p.stop().await?;
        }
        for c in &mut self.replicas.controls {
            c.stop().await?;
        }
        self.standalone.stop().await?;
        for r in self.registrations.drain(..) {
            r.stop().await;
        }
        self.decode.stop().await?;
        self.prefill.stop().await?;
        Ok(())
    }
}

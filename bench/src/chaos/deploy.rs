//! The chaos bench's deployment, every socket on port 0, started with the workspace's test kit
//! (`infera-testkit`): a real etcd; two prefill and two decode sims (one rank each) in this
//! process, registered in etcd under leases as the launcher's registrar does; one `infera-control`
//! process following etcd (the registry and its leader lease: a single replica that leads); and
//! two `infera-proxy` processes. `prefill-0` and `decode-0` get the faults; `prefill-1` and
//! `decode-1` stay healthy, so a retry always has somewhere to go.

use std::time::Duration;

use anyhow::Context as _;
use infera_proto::pb;
use infera_testkit::{
    Control, ControlSpec, EtcdServer, Proxy, ProxySpec, Registration, Sim, SimSpec, Workers,
};
use tonic::transport::{Channel, Endpoint};

/// The served model name.
pub(crate) const MODEL: &str = "m";
/// The workers' etcd lease TTL (the launcher's registrar default).
const WORKER_LEASE_TTL: Duration = Duration::from_secs(10);
/// One probe call's deadline (control may be down).
const CALL_TIMEOUT: Duration = Duration::from_millis(1_000);

/// What to start.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    /// The sims' `--sim-speedup`.
    pub(crate) speedup: f64,
    /// The sims' `--sim-bootstrap-timeout-ms`.
    pub(crate) bootstrap_timeout_ms: u64,
    pub(crate) seed: u64,
    /// Control's flags (on top of `--etcd`).
    pub(crate) control_flags: Vec<String>,
    /// Every proxy's flags.
    pub(crate) proxy_flags: Vec<String>,
}

/// A running deployment.
#[derive(Debug)]
pub(crate) struct Deployment {
    /// prefill-0 (faulty), prefill-1, decode-0 (faulty), decode-1.
    pub(crate) sims: Vec<Sim>,
    registrations: Vec<Registration>,
    pub(crate) control: Control,
    /// An Admin client on a lazy channel with deadlines (control may be down).
    pub(crate) admin: pb::admin_client::AdminClient<Channel>,
    pub(crate) proxies: Vec<Proxy>,
    /// Kept last: dropped (killed) after everything that talks to it.
    pub(crate) etcd: EtcdServer,
}

impl Deployment {
    /// Starts everything and waits (bounded) until control leads with the four workers and every
    /// proxy routes.
    pub(crate) async fn start(spec: &Spec) -> anyhow::Result<Self> {
        let etcd = tokio::task::spawn_blocking(EtcdServer::start).await.context("etcd does not start")?;
        let mut sims = Vec::new();
        for s in [
            SimSpec::prefill("prefill-0", MODEL),
            SimSpec::prefill("prefill-1", MODEL),
            SimSpec::decode("decode-0", MODEL, 1),
            SimSpec::decode("decode-1", MODEL, 1),
        ] {
            let s = s
                .model_path(MODEL)
                .seed(spec.seed)
                .speedup(spec.speedup)
                .sim_flag("--sim-bootstrap-timeout-ms", spec.bootstrap_timeout_ms)
                .sim_flag("--sim-log", "error");
            sims.push(s.start().await?);
        }
        let registrations = sims
            .iter()
            .map(|s| Registration::start(vec![etcd.url()], s.record.clone(), WORKER_LEASE_TTL))
            .collect();
        let control = ControlSpec::new(Workers::None)
            .etcd(etcd.url())
            .flags(spec.control_flags.iter().cloned())
            .spawn()
            .await?;
        control.wait_leading().await?;
        let endpoint =
            Endpoint::from_shared(control.url())?.connect_timeout(CALL_TIMEOUT).timeout(CALL_TIMEOUT);
        let admin = pb::admin_client::AdminClient::new(endpoint.connect_lazy());
        let probe = admin.clone();
        infera_testkit::poll(Duration::from_secs(30), "control to list the four workers", async || {
            let rows = probe.clone().list_targets(pb::ListTargetsRequest::default()).await.ok()?;
            (rows.into_inner().targets.len() == 4).then_some(())
        })
        .await?;
        let mut proxies = Vec::new();
        for _ in 0..2 {
            let proxy = ProxySpec::new(control.url()).flags(spec.proxy_flags.iter().cloned());
            proxies.push(proxy.spawn().await?);
        }
        for p in &proxies {
            p.wait_ready(MODEL).await?;
        }
        Ok(Self { sims, registrations, control, admin, proxies, etcd })
    }

    /// The proxies' base URLs.
    pub(crate) fn proxy_urls(&self) -> Vec<String> {
        self.proxies.iter().map(|p| p.url.clone()).collect()
    }

    /// The sim named `name`.
    pub(crate) fn sim(&self, name: &str) -> &Sim {
        self.sims.iter().find(|s| s.record.id.as_str() == name).expect("a sim of the deployment")
    }

    /// Control's leadership as it answers `GetConfig` (`None` while it does not answer).
    pub(crate) async fn leadership(&self) -> Option<pb::Leadership> {
        let config = self.admin.clone().get_config(pb::GetConfigRequest::default()).await.ok()?;
        config.into_inner().leadership
    }

    /// Every target's row (`None` while control does not answer).
    pub(crate) async fn targets(&self) -> Option<Vec<pb::TargetStatus>> {
        let rows = self.admin.clone().list_targets(pb::ListTargetsRequest::default()).await.ok()?;
        Some(rows.into_inner().targets)
    }

    /// Stops every part gracefully, in order: the proxies (closing their leases), control, the
    /// registrations, the sims; etcd last (on drop).
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        for p in &mut self.proxies {
            p.stop().await?;
        }
        self.control.stop().await?;
        for r in self.registrations.drain(..) {
            r.stop().await;
        }
        for s in &mut self.sims {
            s.stop().await?;
        }
        Ok(())
    }
}

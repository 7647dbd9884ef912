//! The chaos bench's deployment, every socket on port 0, the workspace's test kit's cluster
//! (`infera_testkit::Cluster`): a real etcd; two prefill and two decode sims (one rank each,
//! `two_of_each`) in this process, registered in etcd under leases as the launcher's registrar
//! does; one `infera-control` process following etcd (the registry and its leader lease: a
//! single replica that leads); and two `infera-proxy` processes. `prefill-0` and `decode-0` get
//! the faults; `prefill-1` and `decode-1` stay healthy, so a retry always has somewhere to go.

use std::time::Duration;

use infera_proto::pb;
use infera_testkit::{Cluster, ClusterSpec, ControlSpec, Sim, Workers};
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

/// A running deployment: the test kit's cluster, and an Admin client that gives up quickly.
#[derive(Debug)]
pub(crate) struct Deployment {
    /// prefill-0 (faulty), prefill-1, decode-0 (faulty), decode-1; control; the proxies; etcd.
    pub(crate) cluster: Cluster,
    /// An Admin client on a lazy channel with deadlines (control may be down).
    pub(crate) admin: pb::admin_client::AdminClient<Channel>,
}

impl Deployment {
    /// Starts everything and waits (bounded) until control leads with the four workers and every
    /// proxy routes.
    pub(crate) async fn start(spec: &Spec) -> anyhow::Result<Self> {
        let sims = infera_testkit::cluster::two_of_each(MODEL)
            .into_iter()
            .map(|s| {
                s.model_path(MODEL)
                    .seed(spec.seed)
                    .speedup(spec.speedup)
                    .sim_flag("--sim-bootstrap-timeout-ms", spec.bootstrap_timeout_ms)
                    .sim_flag("--sim-log", "error")
            })
            .collect();
        let mut cluster = ClusterSpec::new(MODEL, sims);
        cluster.control = ControlSpec::new(Workers::None).flags(spec.control_flags.iter().cloned());
        cluster.proxy_flags.clone_from(&spec.proxy_flags);
        cluster.etcd = Some(WORKER_LEASE_TTL);
        (cluster.processes, cluster.sims_in_process) = (true, true);
        let cluster = cluster.start().await?;
        cluster.control.wait_leading().await?;
        let endpoint =
            Endpoint::from_shared(cluster.control.url())?.connect_timeout(CALL_TIMEOUT).timeout(CALL_TIMEOUT);
        let admin = pb::admin_client::AdminClient::new(endpoint.connect_lazy());
        let probe = admin.clone();
        infera_testkit::poll(Duration::from_secs(30), "control to list the four workers", async || {
            let rows = probe.clone().list_targets(pb::ListTargetsRequest::default()).await.ok()?;
            (rows.into_inner().targets.len() == 4).then_some(())
        })
        .await?;
        Ok(Self { cluster, admin })
    }

    /// The proxies' base URLs.
    pub(crate) fn proxy_urls(&self) -> Vec<String> {
        self.cluster.proxy_urls()
    }

    /// The sim named `name`.
    pub(crate) fn sim(&self, name: &str) -> &Sim {
        self.cluster.sim(name)
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
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.cluster.stop().await
    }
}

//! A whole deployment on loopback: sims (prefill, decode, mixed), one control, N proxies and,
//! optionally, a real etcd the workers register in — every socket on port 0, every part in
//! this process or as a real process, and each handle stoppable, killable and restartable.

use std::time::Duration;

use infera_proto::pb;
use infera_proto::types::WorkerRecord;
use infera_registry::register::Registration;
use infera_registry::roles;

use crate::control::{Control, ControlSpec, Ledger, Workers};
use crate::etcd::{Auth, EtcdServer};
use crate::eventually::poll;
use crate::proxy::{Proxy, ProxySpec};
use crate::sim::{Sim, SimSpec};

/// How long the ledger may take to return to zero once the traffic is over.
const DRAINED: Duration = Duration::from_secs(15);

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// The served model the proxies wait for.
    pub model: String,
    /// The workers, prefills first.
    pub sims: Vec<SimSpec>,
    /// Workers already running, by their records (real SGLang servers a test binary shares,
    /// [`crate::Engine::record`]), after the sims'.
    pub running: Vec<WorkerRecord>,
    /// Control (its workers are set from the sims).
    pub control: ControlSpec,
    /// How many proxies.
    pub proxies: usize,
    /// Every proxy's flags on top of [`ProxySpec::new`].
    pub proxy_flags: Vec<String>,
    /// The flags of each proxy on top of `proxy_flags`, by start order (its credential for
    /// control, say); a proxy past the list's end has none.
    pub each_proxy: Vec<Vec<String>>,
    /// Workers register in a real etcd (lease TTL), which control follows, instead of a
    /// static workers file.
    pub etcd: Option<Duration>,
    /// That etcd as deployments run it ([`EtcdServer::start_secure`]: TLS, client certificates
    /// required, auth with infera's roles): control as `infera-control` with its password, the
    /// registrations as `infera-launch` by certificate.
    pub etcd_secured: bool,
    /// The API key the proxies' readiness probe shows (a deployment with `--api-keys`).
    pub proxy_api_key: Option<String>,
    /// Every part as a real process (else all in this process).
    pub processes: bool,
    /// The sims in this process even with `processes` (control and the proxies, which a run
    /// kills and restarts, as processes; the sims, which it does not, cheaper in here).
    pub sims_in_process: bool,
}

/// Two prefills and two decodes of one rank each, `prefill-0`, `prefill-1`, `decode-0`,
/// `decode-1`: the chaos runs' deployment (the suite's and the bench's), where the `-0`s get the
/// faults and the `-1`s stay healthy, so that a retry always has somewhere to go.
pub fn two_of_each(model: &str) -> Vec<SimSpec> {
    vec![
        SimSpec::prefill("prefill-0", model),
        SimSpec::prefill("prefill-1", model),
        SimSpec::decode("decode-0", model, 1),
        SimSpec::decode("decode-1", model, 1),
    ]
}

impl ClusterSpec {
    /// Workers already running (see [`ClusterSpec::running`]).
    pub fn running(mut self, records: impl IntoIterator<Item = WorkerRecord>) -> Self {
        self.running.extend(records);
        self
    }

    /// `model` served by `sims`, a control with `--decode-input-demand on`, two proxies, a
    /// static workers file, everything in this process.
    pub fn new(model: &str, sims: Vec<SimSpec>) -> Self {
        Self {
            model: model.to_owned(),
            sims,
            running: Vec::new(),
            control: ControlSpec::new(Workers::None).flags(["--decode-input-demand", "on"]),
            proxies: 2,
            proxy_flags: Vec::new(),
            each_proxy: Vec::new(),
            etcd: None,
            etcd_secured: false,
            proxy_api_key: None,
            processes: false,
            sims_in_process: false,
        }
    }

    /// Starts everything and waits (bounded) until every proxy routes.
    ///
    /// # Errors
    /// When a part does not start or the proxies are not ready in time.
    pub async fn start(self) -> anyhow::Result<Cluster> {
        let start = if self.etcd_secured { EtcdServer::start_secure } else { EtcdServer::start };
        let etcd = match self.etcd {
            Some(_) => Some(tokio::task::spawn_blocking(start).await?),
            None => None,
        };
        let mut sims = Vec::new();
        for spec in self.sims {
            let process = self.processes && !self.sims_in_process;
            sims.push(if process { spec.spawn().await? } else { spec.start().await? });
        }
        let records: Vec<WorkerRecord> =
            sims.iter().map(|s| s.record.clone()).chain(self.running.iter().cloned()).collect();
        let mut control_spec = self.control;
        let mut registrations = Vec::new();
        match (&etcd, self.etcd) {
            (Some(etcd), Some(ttl)) => {
                control_spec =
                    control_spec.etcd(etcd.url()).flags(etcd.flags_as(roles::CONTROL.name, Auth::Password));
                let registrar = etcd.client_as(roles::LAUNCH.name, Auth::Certificate);
                for r in &records {
                    registrations.push(Registration::start(registrar.clone(), r.clone(), ttl));
                }
            }
            _ => control_spec.workers = Workers::Records(records),
        }
        let control = if self.processes { control_spec.spawn().await? } else { control_spec.start().await? };
        // Every worker routable before a proxy takes its first list: a PD model must not look
        // aggregated because its prefill's /server_info answered later than its decode's.
        let targets = sims.iter().map(|s| s.record.dp_size as usize).sum();
        control.wait_targets(targets).await?;
        let mut proxies = Vec::new();
        for i in 0..self.proxies {
            let own = self.each_proxy.get(i).cloned().unwrap_or_default();
            let spec = ProxySpec::new(control.url()).flags(self.proxy_flags.iter().cloned()).flags(own);
            proxies.push(if self.processes { spec.spawn().await? } else { spec.start().await? });
        }
        for p in &proxies {
            p.wait_ready_as(&self.model, self.proxy_api_key.as_deref()).await?;
        }
        Ok(Cluster { model: self.model, sims, control, proxies, registrations, etcd })
    }
}

/// A running deployment.
#[derive(Debug)]
pub struct Cluster {
    /// The served model.
    pub model: String,
    /// The workers, in spec order.
    pub sims: Vec<Sim>,
    /// Control.
    pub control: Control,
    /// The proxies, in start order.
    pub proxies: Vec<Proxy>,
    /// The workers' etcd registrations (with `etcd`).
    pub registrations: Vec<Registration>,
    /// The etcd (with `etcd`).
    pub etcd: Option<EtcdServer>,
}

impl Cluster {
    /// The sim with this worker id.
    ///
    /// # Panics
    /// When there is none.
    pub fn sim(&self, name: &str) -> &Sim {
        self.sims.iter().find(|s| s.record.id.as_str() == name).unwrap_or_else(|| panic!("no sim {name}"))
    }

    /// The etcd.
    ///
    /// # Panics
    /// When the cluster runs without one.
    pub fn etcd(&mut self) -> &mut EtcdServer {
        self.etcd.as_mut().expect("a cluster with etcd")
    }

    /// The proxies' base URLs.
    pub fn proxy_urls(&self) -> Vec<String> {
        self.proxies.iter().map(|p| p.url.clone()).collect()
    }

    /// Waits (bounded) until control's ledger holds nothing: no held request, no booked token
    /// and no reservation. On expiry the error lists what is left.
    ///
    /// # Errors
    /// When the ledger does not return to zero in time.
    pub async fn ledger_returns_to_zero(&self) -> anyhow::Result<()> {
        let control = &self.control;
        let drained = poll(DRAINED, "the ledger to return to zero", async || {
            let empty = control.ledger().await == Ledger::default();
            empty.then_some(())
        })
        .await;
        let left = control
            .admin()
            .await
            .list_reservations(pb::ListReservationsRequest::default())
            .await?
            .into_inner()
            .reservations;
        match drained {
            Ok(()) if left.is_empty() => Ok(()),
            _ => {
                let shown: Vec<String> = left
                    .iter()
                    .take(20)
                    .map(|r| {
                        format!("{} kind={} {:?} tokens={}", r.request_id, r.kind, r.target, r.input_tokens)
                    })
                    .collect();
                anyhow::bail!(
                    "ledger not back to zero: {:?}; left (first 20): {shown:#?}",
                    control.ledger().await
                )
            }
        }
    }

    /// Stops every part gracefully, in order: proxies (closing their leases), control, the
    /// registrations, the sims.
    ///
    /// # Errors
    /// The first part that does not stop cleanly.
    pub async fn stop(mut self) -> anyhow::Result<()> {
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

//! The proxy's link to infera-control. Serving never stops because control is down: a pick that
//! does not answer within `--pick-timeout-ms`, or any pick while the proxy holds no lease, is
//! routed locally from the last known target list (least of this proxy's in-flight legs) and
//! counted.
//!
//! What lives where:
//!
//! - [`ControlLink`] (here): the gRPC client and the parts below, started by
//!   [`ControlLink::spawn`].
//! - `lease`: the lease, opened at start, renewed every TTL/3, reopened at once when control
//!   forgets it, closed at shutdown.
//! - `targets_refresh`: the target list, refreshed every `--targets-refresh-ms` for the fallback
//!   and for `/v1/models`.
//! - `pick_call`: one pick — the RPC with its deadline, control's refusals, and the late answer
//!   of a pick the proxy stopped waiting for (released at once).
//! - `page_hashes`: the prompt's page hashes a KV-aware prefill pick carries.
//! - `fallback`: the local choice when control cannot answer.
//! - `pick`: [`Pick`], the chosen target of one leg, released exactly once; [`PickError`].
//! - `release`: a leg's end — the local count at once, control's reservation in the background,
//!   retried while control is unreachable.

mod fallback;
mod lease;
mod page_hashes;
mod pick;
mod pick_call;
mod release;
mod targets_refresh;

use std::sync::Arc;
use std::time::Duration;

use infera_proto::pb::router_client::RouterClient;
use infera_proto::types::LeaseId;
use tonic::transport::{Channel, Endpoint as GrpcEndpoint};

use self::fallback::Fallback;
use self::lease::Lease;
pub use self::pick::{Pick, PickError};
use self::release::Releaser;
use self::targets_refresh::KnownTargets;
use crate::config::Config;
use crate::metrics::ProxyMetrics;
use crate::targets::{LocalLoad, TargetList};

/// The proxy's connection to control: the gRPC client, the lease, the last target list, the
/// releases in flight and the local fallback.
#[derive(Debug)]
pub struct ControlLink {
    client: RouterClient<Channel>,
    pick_timeout: Duration,
    lease: Arc<Lease>,
    targets: Arc<KnownTargets>,
    releaser: Arc<Releaser>,
    fallback: Fallback,
    metrics: Arc<ProxyMetrics>,
}

impl ControlLink {
    /// A link to `config.control`, holding its lease as `name`; nothing is sent until
    /// [`ControlLink::spawn`].
    pub fn new(config: &Config, name: String, metrics: Arc<ProxyMetrics>) -> Arc<Self> {
        let channel = GrpcEndpoint::from(config.control.clone())
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .connect_lazy();
        let client = RouterClient::new(channel);
        let lease = Arc::new(Lease::new(name, config.lease_ttl));
        let releaser =
            Arc::new(Releaser::new(client.clone(), lease.clone(), LocalLoad::default(), metrics.clone()));
        Arc::new(Self {
            client,
            pick_timeout: config.pick_timeout,
            lease,
            targets: Arc::new(KnownTargets::new(config.targets_refresh)),
            releaser,
            fallback: Fallback::new(),
            metrics,
        })
    }

    /// Starts the lease and target-list loops; they end when `stop` fires.
    pub fn spawn(self: &Arc<Self>, stop: tokio::sync::watch::Receiver<()>) {
        let (client, metrics) = (self.client.clone(), self.metrics.clone());
        tokio::spawn(self.lease.clone().run(client.clone(), metrics.clone(), stop.clone()));
        tokio::spawn(self.targets.clone().run(client, metrics, stop));
    }

    /// The lease held now.
    pub fn lease(&self) -> Option<LeaseId> {
        self.lease.get()
    }

    /// The last known target list.
    pub fn targets(&self) -> Arc<TargetList> {
        self.targets.get()
    }

    /// Closes the lease at shutdown (best effort): control releases what it still holds.
    pub async fn close(&self) {
        self.lease.close(self.client.clone()).await;
    }
}

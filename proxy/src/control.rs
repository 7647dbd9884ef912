//! The proxy's link to infera-control. Serving never stops because control is down: a pick that
//! does not answer within `--pick-timeout-ms`, or any pick while the proxy holds no lease, is
//! routed locally from the last known target list (least of this proxy's in-flight legs) and
//! counted.
//!
//! What lives where:
//!
//! - [`ControlLink`] (here): the parts below, started by [`ControlLink::spawn`].
//! - `controls`: the control replicas (`--control a,b,c`) and the one talked to now; never a
//!   plain-text leader once control is reached over TLS.
//! - [`credential`]: the proxy's token for control (`--control-token-file`), on every call.
//! - `lease`: the lease, opened at start, renewed every TTL/3, reopened at once when control
//!   forgets it or does not lead (moving to the leader), closed at shutdown.
//! - `legs` and `redeclare`: every leg in flight, and re-declaring those not booked under the
//!   lease held now (after a restart or failover, and local fallback picks).
//! - `targets_refresh`: the target list, refreshed every `--targets-refresh-ms` for the fallback
//!   and for `/v1/models`.
//! - `pick_call`: one pick — the RPC with its deadline, control's refusals, and the late answer
//!   of a pick the proxy stopped waiting for (released at once); its `queue` sends the picks
//!   asked together in one `PickMany`.
//! - `page_hashes`: the prompt's page hashes a KV-aware prefill pick carries, and a decode pick
//!   waiting in admission's queue.
//! - `fallback`: the local choice when control cannot answer.
//! - `pick`: [`Pick`], the chosen target of one leg, released exactly once; [`PickError`].
//! - `release`: a leg's end — the local count at once, control's reservation in the background,
//!   retried while control is unreachable.

mod controls;
pub mod credential;
mod fallback;
mod lease;
mod legs;
mod page_hashes;
mod pick;
mod pick_call;
mod redeclare;
mod release;
mod targets_refresh;

use std::sync::Arc;
use std::time::Duration;

use infera_proto::types::LeaseId;

use self::controls::Controls;
use self::fallback::Fallback;
use self::lease::Lease;
pub use self::pick::{Pick, PickError};
use self::pick_call::PickQueue;
use self::release::Releaser;
use self::targets_refresh::KnownTargets;
use crate::config::Config;
use crate::metrics::ProxyMetrics;
use crate::targets::TargetList;

/// The proxy's connection to control: the replicas, the lease, the last target list, the legs
/// in flight and the local fallback.
#[derive(Debug)]
pub struct ControlLink {
    controls: Arc<Controls>,
    /// Picks on their way to control.
    picks: PickQueue,
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
        let tls = config.tls.control.as_ref().map(|t| t.config.clone());
        let bearer = credential::Bearer::new(config.control_token.clone());
        let controls =
            Arc::new(Controls::new(&config.control, tls, bearer, metrics.plaintext_leaders_counter()));
        let lease = Arc::new(Lease::new(name, config.lease_ttl));
        let releaser = Arc::new(Releaser::new(controls.clone(), lease.clone(), metrics.clone()));
        Arc::new(Self {
            picks: PickQueue::new(controls.clone(), metrics.clone()),
            controls,
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
        let (controls, metrics) = (self.controls.clone(), self.metrics.clone());
        let link = self.clone();
        let reconcile = move |held, always| {
            let link = link.clone();
            async move { redeclare::redeclare(&link.releaser, &link.controls, &link.metrics, held, always).await }
        };
        tokio::spawn(self.lease.clone().run(controls.clone(), metrics.clone(), reconcile, stop.clone()));
        tokio::spawn(self.targets.clone().run(controls, metrics, stop));
    }

    /// Reaches `https://` replicas with new TLS files from now on (SIGHUP).
    pub fn set_control_tls(&self, tls: tonic::transport::ClientTlsConfig) {
        self.controls.set_tls(tls);
    }

    /// Legs in flight (booked or local).
    pub fn legs_in_flight(&self) -> usize {
        self.releaser.legs.len()
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
        self.lease.close(&self.controls).await;
    }
}

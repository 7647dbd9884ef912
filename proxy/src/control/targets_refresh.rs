//! The target list, asked of control every `--targets-refresh-ms` (every 100 ms until the first
//! answer): what the local fallback routes on and `/v1/models` lists.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use infera_proto::pb;

use super::controls::Controls;
use crate::metrics::ProxyMetrics;
use crate::targets::TargetList;

/// The last target list control gave.
#[derive(Debug)]
pub(super) struct KnownTargets {
    list: RwLock<Arc<TargetList>>,
    /// Time between two `ListTargets` once one answered.
    refresh: Duration,
}

impl KnownTargets {
    /// Nothing known yet.
    pub(super) fn new(refresh: Duration) -> Self {
        Self { list: RwLock::new(Arc::new(TargetList::default())), refresh }
    }

    /// The last known list.
    pub(super) fn get(&self) -> Arc<TargetList> {
        self.list.read().expect("targets lock").clone()
    }

    /// Refreshes the list until `stop` fires.
    pub(super) async fn run(
        self: Arc<Self>,
        controls: Arc<Controls>,
        metrics: Arc<ProxyMetrics>,
        mut stop: tokio::sync::watch::Receiver<()>,
    ) {
        let mut known = false;
        loop {
            let req = pb::ListTargetsRequest::default();
            // Every replica answers ListTargets, leader or not.
            let (_, mut client) = controls.current();
            match tokio::time::timeout(Duration::from_secs(2), client.list_targets(req)).await {
                Ok(Ok(resp)) => {
                    let list = TargetList::new(resp.into_inner().targets);
                    if !known {
                        let models: Vec<String> = list.models().iter().map(ToString::to_string).collect();
                        tracing::info!(?models, "target list received from control");
                        known = true;
                    }
                    *self.list.write().expect("targets lock") = Arc::new(list);
                }
                _ => metrics.control_error("list_targets"),
            }
            let wait = if known { self.refresh } else { Duration::from_millis(100) };
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

//! Drains the workers' registrars ask for before they stop a worker (`infera-launch` on stop or
//! SIGTERM; manual/operations/rollouts.md). Every replica follows the requests
//! (`/infera/v1/drains/{worker}/request`), so a worker being drained takes no new picks
//! whichever replica leads next. The replica that books (standalone, or the leader) reports
//! what the ledger still holds on each (`/infera/v1/drains/{worker}/held`) when it changes; the
//! registrar stops the worker once that reads 0, so the streams in flight end on their own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use infera_proto::types::WorkerId;
use infera_registry::EtcdConfig;
use infera_registry::drain::{self, Requests};
use tokio::sync::watch;

use crate::state::ControlState;

/// How often the holdings are read for the reports (a change is written within this long).
const REPORT_INTERVAL: Duration = Duration::from_millis(100);

/// What was last written for a worker: for its request at this revision, this many held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Written {
    request: i64,
    held: u64,
}

/// Follows the drain requests in `etcd` and reports on them until `stop`.
pub async fn run(state: Arc<ControlState>, etcd: EtcdConfig, mut stop: watch::Receiver<()>) {
    let (tx, mut requests) = watch::channel(Requests::new());
    tokio::spawn(drain::watch_requests(etcd.clone(), tx, stop.clone()));
    let mut every = tokio::time::interval(REPORT_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut written: BTreeMap<WorkerId, Written> = BTreeMap::new();
    let mut client = None;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            changed = requests.changed() => {
                if changed.is_err() {
                    return;
                }
                state.set_draining(requests.borrow_and_update().keys().cloned().collect());
            }
            _ = every.tick() => {}
        }
        let asked = requests.borrow().clone();
        if asked.is_empty() && written.is_empty() {
            // Nothing asked and nothing to take back: no need for the core lock.
            continue;
        }
        let Some(holdings) = state.drain_holdings() else {
            // Not booking: another replica reports; a later lead writes every report afresh.
            written.clear();
            continue;
        };
        let due: Vec<(WorkerId, Written)> = holdings
            .into_iter()
            .filter_map(|h| {
                let now = Written { request: *asked.get(&h.worker)?, held: h.held_requests };
                (written.get(&h.worker) != Some(&now)).then_some((h.worker, now))
            })
            .collect();
        let gone: Vec<WorkerId> = written.keys().filter(|w| !asked.contains_key(*w)).cloned().collect();
        if due.is_empty() && gone.is_empty() {
            continue;
        }
        let Some(c) = connected(&mut client, &etcd).await else { continue };
        for (worker, now) in due {
            match drain::report(c, &worker, now.held).await {
                Ok(()) => {
                    tracing::info!(%worker, held_requests = now.held, "drain: reported what the worker still holds");
                    written.insert(worker, now);
                }
                Err(e) => {
                    tracing::warn!(%worker, error = %e, "drain: cannot write the report; trying again");
                    client = None;
                    break;
                }
            }
        }
        let Some(c) = client.as_mut() else { continue };
        for worker in gone {
            if let Err(e) = drain::clear_report(c, &worker).await {
                tracing::warn!(%worker, error = %e, "drain: cannot delete the report of an ended drain");
            }
            written.remove(&worker);
        }
    }
}

async fn connected<'a>(
    client: &'a mut Option<etcd_client::Client>,
    etcd: &EtcdConfig,
) -> Option<&'a mut etcd_client::Client> {
    if client.is_none() {
        match infera_registry::connect(etcd).await {
            Ok(c) => *client = Some(c),
            Err(e) => tracing::warn!(error = %e, "drain: cannot reach etcd for the reports"),
        }
    }
    client.as_mut()
}

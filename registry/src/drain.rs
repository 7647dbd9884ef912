//! Draining a worker before it stops (manual/operations/rollouts.md): its registrar asks, and
//! control's leader answers from the ledger.
//!
//! - `/infera/v1/drains/{worker}/request`: put by the worker's registrar under the worker's
//!   own lease ([`crate::Registration::drain`]), so it goes with the registration. Every control
//!   replica watches these ([`watch_requests`]); a requested worker takes no new picks.
//! - `/infera/v1/drains/{worker}/held`: put by the leader while the request stands: how many
//!   requests the ledger still holds on the worker's ranks, in decimal, rewritten as it changes.
//!
//! The registrar waits ([`wait_drained`]) for a report newer than its request that says 0, or
//! for its deadline, and only then deregisters and stops the worker: the streams in flight end
//! on their own.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use infera_proto::types::WorkerId;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::keys::{self, report_key, requested_worker};
use crate::{EtcdConfig, RegistryError, connect};

/// How often [`wait_drained`] reads the leader's report.
const POLL: Duration = Duration::from_millis(100);

/// How a registrar's wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// The leader reported nothing held on the worker.
    Empty,
    /// The deadline came first; `held` is what the last report said (`None`: no report came,
    /// no control leader answered the request).
    Deadline {
        /// Requests the ledger still held at the last report.
        held: Option<u64>,
    },
}

/// Waits until control's leader reports, after revision `since` (the request's), that the
/// ledger holds nothing on `worker`, or until `deadline`. etcd errors are retried until the
/// deadline: a registrar that cannot read the report stops the worker at the deadline.
pub async fn wait_drained(etcd: &EtcdConfig, worker: &WorkerId, since: i64, deadline: Instant) -> Drained {
    let mut report = KeyReader::new(etcd, report_key(worker), "the drain report");
    let mut held = None;
    loop {
        if let Some(kvs) = report.read().await {
            let fresh = kvs.iter().find(|kv| kv.mod_revision() > since);
            if let Some(n) = fresh.and_then(|kv| std::str::from_utf8(kv.value()).ok()?.trim().parse().ok()) {
                held = Some(n);
                if n == 0 {
                    return Drained::Empty;
                }
            }
        }
        let next = Instant::now() + POLL;
        if next >= deadline {
            tokio::time::sleep_until(deadline).await;
            return Drained::Deadline { held };
        }
        tokio::time::sleep_until(next).await;
    }
}

/// One key read again and again by a registrar: a lost connection is made again at the next read.
pub(crate) struct KeyReader<'a> {
    etcd: &'a EtcdConfig,
    key: String,
    /// What the key holds, for the log.
    what: &'static str,
    client: Option<etcd_client::Client>,
}

impl<'a> KeyReader<'a> {
    /// Reads `key` (which holds `what`) in `etcd`.
    pub(crate) fn new(etcd: &'a EtcdConfig, key: String, what: &'static str) -> Self {
        Self { etcd, key, what, client: None }
    }

    /// The key's values now; `None` when etcd could not be read (a failed read is logged).
    pub(crate) async fn read(&mut self) -> Option<Vec<etcd_client::KeyValue>> {
        if self.client.is_none() {
            self.client = connect(self.etcd).await.ok();
        }
        match self.client.as_mut()?.get(self.key.as_str(), None).await {
            Ok(mut answer) => Some(answer.take_kvs()),
            Err(e) => {
                tracing::warn!(key = %self.key, error = %e, "cannot read {}; trying again", self.what);
                self.client = None;
                None
            }
        }
    }
}

/// The drain requests standing: each requested worker with the revision its request was put
/// at (a request put again, by a new registration, is a new request).
pub type Requests = BTreeMap<WorkerId, i64>;

/// Keeps `requests` equal to the drain requests in `etcd`: a snapshot of the prefix, then a
/// watch from its revision; after an error, a new snapshot (an outage keeps the last set).
/// Returns when `stop` fires or every receiver is gone.
pub async fn watch_requests(
    etcd: EtcdConfig,
    requests: watch::Sender<Requests>,
    mut stop: watch::Receiver<()>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = tokio::select! {
            r = watch_round(&etcd, &requests) => r,
            _ = stop.changed() => return,
        };
        match result {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "drain-request watch failed; keeping the last set")
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// One snapshot and the watch after it; `Ok` when the receivers are gone.
async fn watch_round(etcd: &EtcdConfig, requests: &watch::Sender<Requests>) -> Result<(), RegistryError> {
    let mut client = connect(etcd).await?;
    let snapshot = client.get(keys::DRAINS, Some(GetOptions::new().with_prefix().with_keys_only())).await?;
    let revision = snapshot.header().map_or(0, etcd_client::ResponseHeader::revision);
    let now: Requests = snapshot
        .kvs()
        .iter()
        .filter_map(|kv| Some((requested_worker(kv.key_str().ok()?)?, kv.mod_revision())))
        .collect();
    requests.send_if_modified(|current| {
        let changed = *current != now;
        *current = now;
        changed
    });
    let options = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
    let mut stream = client.watch(keys::DRAINS, Some(options)).await?;
    while let Some(answer) = stream.message().await? {
        if answer.canceled() {
            return Err(RegistryError::Etcd(etcd_client::Error::WatchError("drain watch canceled".into())));
        }
        for event in answer.events() {
            let Some(kv) = event.kv() else { continue };
            let Some(id) = kv.key_str().ok().and_then(requested_worker) else { continue };
            let put = event.event_type() == EventType::Put;
            requests.send_modify(|set| {
                if put {
                    set.insert(id, kv.mod_revision());
                } else {
                    set.remove(&id);
                }
            });
        }
        if requests.is_closed() {
            return Ok(());
        }
    }
    Err(RegistryError::Etcd(etcd_client::Error::WatchError("drain watch ended".into())))
}

/// Writes the leader's report: `held` requests on `worker`.
pub async fn report(
    client: &mut etcd_client::Client,
    worker: &WorkerId,
    held: u64,
) -> Result<(), RegistryError> {
    client.put(report_key(worker), held.to_string(), None).await?;
    Ok(())
}

/// Deletes the report of a worker whose request is gone.
pub async fn clear_report(client: &mut etcd_client::Client, worker: &WorkerId) -> Result<(), RegistryError> {
    client.delete(report_key(worker), None).await?;
    Ok(())
}

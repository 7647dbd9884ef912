//! The worker watch: a snapshot of the prefix, then a watch from the snapshot's revision. Any
//! error (etcd down, stream broken, revision compacted) ends the round; the next round takes a
//! new snapshot and sends only its diff against what was already sent, so nothing is dropped
//! and re-added and nothing is applied twice. While etcd is away the last view stands.

use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use infera_proto::types::RegisteredWorker;
use tokio::sync::{mpsc, watch};

use crate::diff::{Change, Workers, apply, diff};
use crate::{EtcdConfig, RegistryError, connect, keys};

/// Sends every change of the registered workers in `etcd` to `changes` until `stop` fires (or
/// the receiver is gone). `synced` is told after the first snapshot was sent. A refusal (a
/// certificate, credentials or a role etcd no longer accepts) is handled as an outage: the last
/// view stands and the watch tries again.
pub async fn watch_workers(
    etcd: impl Into<EtcdConfig>,
    changes: mpsc::Sender<Change>,
    synced: Option<tokio::sync::oneshot::Sender<()>>,
    mut stop: watch::Receiver<()>,
) {
    let etcd = etcd.into();
    let mut known = Workers::new();
    let mut synced = synced;
    let mut backoff = Duration::from_millis(100);
    loop {
        let round = watch_round(&etcd, &mut known, &changes, &mut synced);
        let result = tokio::select! {
            r = round => r,
            _ = stop.changed() => return,
        };
        match result {
            Ok(Round::Closed) => return,
            Ok(Round::Resync) => {
                tracing::info!("registry watch canceled (compaction?); resyncing");
                backoff = Duration::from_millis(100);
            }
            Err(e) => {
                tracing::warn!(error = %e, workers = known.len(), retry_in = ?backoff, "registry watch failed; keeping the last view");
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

enum Round {
    /// The receiver of changes is gone.
    Closed,
    /// The watch was canceled (e.g. its revision was compacted): take a new snapshot.
    Resync,
}

async fn watch_round(
    etcd: &EtcdConfig,
    known: &mut Workers,
    changes: &mpsc::Sender<Change>,
    synced: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<Round, RegistryError> {
    let mut client = connect(etcd).await?;
    let snapshot = client.get(keys::WORKERS, Some(GetOptions::new().with_prefix())).await?;
    let revision = snapshot.header().map_or(0, etcd_client::ResponseHeader::revision);
    let mut current = Workers::new();
    let mut refused = Vec::new();
    for kv in snapshot.kvs() {
        match record(kv.key(), kv.value()) {
            Ok(r) => {
                current.insert(r.id.clone(), r);
            }
            Err(change) => refused.push(change),
        }
    }
    for change in diff(known, &current).into_iter().chain(refused) {
        if changes.send(change).await.is_err() {
            return Ok(Round::Closed);
        }
    }
    *known = current;
    if let Some(s) = synced.take() {
        let _ = s.send(());
    }
    let options = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
    let mut stream = client.watch(keys::WORKERS, Some(options)).await?;
    while let Some(resp) = stream.message().await? {
        if resp.canceled() {
            return Ok(Round::Resync);
        }
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            let change = match event.event_type() {
                EventType::Put => match record(kv.key(), kv.value()) {
                    Ok(r) => Change::Upsert(Box::new(r)),
                    Err(refused) => refused,
                },
                EventType::Delete => match std::str::from_utf8(kv.key()).ok().and_then(keys::worker_id) {
                    Some(id) => Change::Remove(id),
                    None => continue,
                },
            };
            if apply(known, &change) && changes.send(change).await.is_err() {
                return Ok(Round::Closed);
            }
        }
    }
    Err(RegistryError::Etcd(etcd_client::Error::WatchError("the watch stream ended".into())))
}

/// A valid worker record stored at `key`, or the refusal (logged) of anything else.
fn record(key: &[u8], value: &[u8]) -> Result<RegisteredWorker, Change> {
    let key = String::from_utf8_lossy(key);
    let refuse = |problem: String| {
        tracing::warn!(key = ?key, problem = ?problem, "worker record refused; ignored");
        Change::Refused { key: key.to_string(), problem }
    };
    let Some(id) = keys::worker_id(&key) else { return Err(refuse("not a worker key".into())) };
    match serde_json::from_slice::<RegisteredWorker>(value) {
        Ok(r) if r.id != id => Err(refuse(format!("record id {:?} does not match its key", r.id.as_str()))),
        Ok(r) => match r.check() {
            Ok(()) => Ok(r),
            Err(problem) => Err(refuse(problem.to_owned())),
        },
        Err(e) => Err(refuse(format!("malformed: {e}"))),
    }
}

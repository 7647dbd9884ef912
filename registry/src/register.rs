//! Keeping a worker registered: its record under a lease (TTL 10 s by default), renewed every
//! TTL/3 by a background task. If etcd goes away the task reconnects, re-grants and re-puts;
//! an unchanged record is not a change for watchers. Stopping revokes the lease (the key goes
//! at once); dropping the registration (or the registrar dying) lets the lease expire. Before
//! it stops, a registrar may ask for a drain ([`Registration::drain`], [`crate::drain`]): the
//! request lives under the same lease, put again with the record after every re-registration.

use std::time::Duration;

use etcd_client::PutOptions;
use infera_proto::types::RegisteredWorker;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::{EtcdConfig, RegistryError, connect, keys};

/// The lease TTL of worker records (`manual/operations/etcd.md`): a registrar that dies is gone
/// from the view within this long.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// A live registration.
#[derive(Debug)]
pub struct Registration {
    stop: Option<oneshot::Sender<()>>,
    drain: mpsc::UnboundedSender<oneshot::Sender<i64>>,
    task: Option<JoinHandle<()>>,
}

impl Registration {
    /// Registers `record` in `etcd` (endpoints, or an [`EtcdConfig`] with credentials) with a
    /// lease of `ttl` (whole seconds, at least 1) and keeps it registered until stopped. A
    /// [`infera_proto::types::WorkerRecord`] is written with its `dp_size`; a
    /// [`RegisteredWorker`] without one leaves it out.
    pub fn start(etcd: impl Into<EtcdConfig>, record: impl Into<RegisteredWorker>, ttl: Duration) -> Self {
        let (stop, stopped) = oneshot::channel();
        let (drain, drains) = mpsc::unbounded_channel();
        let drains = Drains { asked: drains, draining: false, waiting: Vec::new() };
        let task = tokio::spawn(keep_registered(etcd.into(), record.into(), ttl, stopped, drains));
        Self { stop: Some(stop), drain, task: Some(task) }
    }

    /// Asks control to drain the worker: its drain request is put under the registration's
    /// lease (and again after every re-registration). Returns the revision of the put, which
    /// control's report must pass ([`crate::drain::wait_drained`]), once etcd has taken it;
    /// `None` if the registration has ended.
    pub async fn drain(&self) -> Option<i64> {
        let (tx, rx) = oneshot::channel();
        self.drain.send(tx).ok()?;
        rx.await.ok()
    }

    /// Deregisters now: the lease is revoked and the record deleted.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Like a registrar that died: no revoke; the lease expires after its TTL.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

enum Ended {
    Stopped,
}

/// The drain asked of a registration: whether it stands, and who waits for its put.
struct Drains {
    asked: mpsc::UnboundedReceiver<oneshot::Sender<i64>>,
    draining: bool,
    waiting: Vec<oneshot::Sender<i64>>,
}

impl Drains {
    /// Puts the request under `lease` if a drain was asked, and tells whoever waits.
    async fn put(
        &mut self,
        client: &mut etcd_client::Client,
        record: &RegisteredWorker,
        lease: i64,
    ) -> Result<(), RegistryError> {
        if !self.draining {
            return Ok(());
        }
        let key = keys::request_key(&record.id);
        let put = client.put(key, "", Some(PutOptions::new().with_lease(lease))).await?;
        let revision = put.header().map_or(0, etcd_client::ResponseHeader::revision);
        tracing::info!(worker = %record.id, revision, "drain asked");
        for w in self.waiting.drain(..) {
            let _ = w.send(revision);
        }
        Ok(())
    }
}

async fn keep_registered(
    etcd: EtcdConfig,
    record: RegisteredWorker,
    ttl: Duration,
    mut stop: oneshot::Receiver<()>,
    mut drains: Drains,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match register_once(&etcd, &record, ttl, &mut stop, &mut drains).await {
            Ok(Ended::Stopped) => return,
            Err(e) => {
                tracing::warn!(worker = %record.id, error = %e, retry_in = ?backoff, "registration lost; registering again")
            }
        }
        tokio::select! {
            _ = &mut stop => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn register_once(
    etcd: &EtcdConfig,
    record: &RegisteredWorker,
    ttl: Duration,
    stop: &mut oneshot::Receiver<()>,
    drains: &mut Drains,
) -> Result<Ended, RegistryError> {
    let mut client = connect(etcd).await?;
    let ttl_secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let lease = client.lease_grant(ttl_secs, None).await?.id();
    let value = serde_json::to_vec(record)
        .map_err(|source| RegistryError::Record { key: keys::worker(&record.id), source })?;
    client.put(keys::worker(&record.id), value, Some(PutOptions::new().with_lease(lease))).await?;
    tracing::info!(worker = %record.id, lease, ttl_secs, "worker registered");
    drains.put(&mut client, record, lease).await?;
    let (mut keeper, mut replies) = client.lease_keep_alive(lease).await?;
    let every = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(1)) / 3;
    loop {
        tokio::select! {
            _ = &mut *stop => {
                let _ = client.lease_revoke(lease).await;
                tracing::info!(worker = %record.id, "worker deregistered");
                return Ok(Ended::Stopped);
            }
            Some(asked) = drains.asked.recv() => {
                drains.draining = true;
                drains.waiting.push(asked);
                drains.put(&mut client, record, lease).await?;
            }
            () = tokio::time::sleep(every) => {
                keeper.keep_alive().await?;
                match replies.message().await? {
                    Some(r) if r.ttl() > 0 => {}
                    _ => return Err(RegistryError::Etcd(etcd_client::Error::LeaseKeepAliveError(format!("lease {lease} expired")))),
                }
            }
        }
    }
}

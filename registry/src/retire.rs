//! An operator's request that a worker be drained and then stopped by its launcher
//! (`Admin/DrainTarget` with `stop_when_drained`; manual/operations/rollouts.md).
//!
//! Control puts `/infera/v1/drains/{worker}/stop`; the worker's registrar ([`wait_asked`])
//! sees it and stops the worker the way it stops one on SIGTERM: its own drain request, the
//! leader's report of what the ledger still holds, deregistration, then the process. The
//! registrar deletes the key when it starts the worker ([`clear`]) and once it has stopped it,
//! so a request is honoured once.

use std::time::Duration;

use infera_proto::types::WorkerId;

use crate::drain::KeyReader;
use crate::keys::stop_key;
use crate::{EtcdConfig, RegistryError, connect};

/// How often a registrar reads its workers' stop keys.
const POLL: Duration = Duration::from_millis(250);

/// Asks `worker`'s registrar to drain and stop it; `by` says who asked (kept as the value).
pub async fn ask(etcd: &EtcdConfig, worker: &WorkerId, by: &str) -> Result<(), RegistryError> {
    connect(etcd).await?.put(stop_key(worker), by, None).await?;
    Ok(())
}

/// Deletes `worker`'s stop request, if any.
pub async fn clear(etcd: &EtcdConfig, worker: &WorkerId) -> Result<(), RegistryError> {
    connect(etcd).await?.delete(stop_key(worker), None).await?;
    Ok(())
}

/// Returns once a stop request for `worker` stands, with who asked. etcd errors are logged and
/// retried: a registrar that cannot read the key waits on.
pub async fn wait_asked(etcd: &EtcdConfig, worker: &WorkerId) -> String {
    let mut request = KeyReader::new(etcd, stop_key(worker), "the worker's stop request");
    loop {
        if let Some(kv) = request.read().await.as_deref().and_then(<[_]>::first) {
            return String::from_utf8_lossy(kv.value()).into_owned();
        }
        tokio::time::sleep(POLL).await;
    }
}

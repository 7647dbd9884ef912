//! The proxies that hold a lease with the leader, kept in etcd under
//! `/infera/v1/control/proxies/{holder}` (value: the lease TTL in ms): written when a lease opens,
//! deleted when it closes or expires. A new leader reads them at takeover
//! ([`super::warmth::Warmth`] waits for each to re-declare). One writer task applies the changes in
//! order; an etcd that does not answer costs only an early or late "warm".

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::GetOptions;
use infera_registry::{EtcdConfig, keys};
use tokio::sync::mpsc;

/// One change of the book.
#[derive(Debug)]
enum Change {
    Opened { holder: String, ttl: Duration },
    Gone { holder: String },
}

/// The writer of the proxies' book.
#[derive(Debug, Clone)]
pub struct HolderBook {
    changes: mpsc::UnboundedSender<Change>,
}

impl HolderBook {
    /// Starts the writer task against `etcd`.
    pub fn start(etcd: EtcdConfig) -> Self {
        let (changes, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut client = None;
            while let Some(change) = rx.recv().await {
                if client.is_none() {
                    client = infera_registry::connect(&etcd).await.ok();
                }
                let Some(c) = client.as_mut() else {
                    tracing::warn!(?change, "etcd unreachable; the proxies' book misses a change");
                    continue;
                };
                let done = match &change {
                    Change::Opened { holder, ttl } => {
                        c.put(keys::control_proxy(holder), ttl.as_millis().to_string(), None).await.map(drop)
                    }
                    Change::Gone { holder } => c.delete(keys::control_proxy(holder), None).await.map(drop),
                };
                if let Err(e) = done {
                    tracing::warn!(error = %e, ?change, "cannot update the proxies' book in etcd");
                    client = None;
                }
            }
        });
        Self { changes }
    }

    /// `holder` opened a lease of `ttl`.
    pub fn opened(&self, holder: &str, ttl: Duration) {
        let _ = self.changes.send(Change::Opened { holder: holder.to_owned(), ttl });
    }

    /// `holder`'s lease closed or expired.
    pub fn gone(&self, holder: &str) {
        let _ = self.changes.send(Change::Gone { holder: holder.to_owned() });
    }
}

/// The proxies the book lists, with their lease TTLs; `None` when etcd did not answer in time.
pub async fn load(etcd: &EtcdConfig) -> Option<HashMap<String, Duration>> {
    let read = async {
        let mut client = infera_registry::connect(etcd).await.ok()?;
        let resp = client.get(keys::CONTROL_PROXIES, Some(GetOptions::new().with_prefix())).await.ok()?;
        Some(
            resp.kvs()
                .iter()
                .filter_map(|kv| {
                    let holder = kv.key_str().ok()?.strip_prefix(keys::CONTROL_PROXIES)?.to_owned();
                    let ms: u64 = kv.value_str().ok()?.parse().ok()?;
                    Some((holder, Duration::from_millis(ms)))
                })
                .collect(),
        )
    };
    tokio::time::timeout(Duration::from_secs(2), read).await.ok().flatten()
}

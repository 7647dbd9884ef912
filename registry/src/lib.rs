//! infera-registry: workers registered in etcd and watched by control.
//!
//! - [`keys`]: the key layout, in one place (`/infera/v1/workers/{id}`, `/infera/v1/config/…`).
//! - [`register`]: a worker record bound to a lease (TTL 10 s, keep-alive every TTL/3), kept
//!   alive by whoever registers the worker; lease gone ⇒ key gone ⇒ worker gone.
//! - [`config`]: persisted admin settings (`/infera/v1/config/{name}`).
//! - [`watch`]: the prefix watched from a revision, resumed after errors and compaction; a
//!   resync is applied as a diff ([`diff`]), never a drop-all; an outage keeps the last view.
//! - [`test_server`]: a real etcd on loopback, for the tests of every crate that needs one.

pub mod config;
pub mod diff;
pub mod keys;
pub mod register;
pub mod test_server;
pub mod watch;

pub use diff::Change;
pub use register::Registration;
pub use watch::watch_workers;

/// What talking to etcd can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// etcd itself (connect, RPC, stream).
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// A worker record that is not valid JSON of the expected shape.
    #[error("worker record at {key}: {source}")]
    Record {
        /// The etcd key of the record.
        key: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
}

/// Connects to etcd at `endpoints` (fails fast when none answers).
pub async fn connect(endpoints: &[String]) -> Result<etcd_client::Client, RegistryError> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(std::time::Duration::from_secs(2))
        .with_timeout(std::time::Duration::from_secs(5))
        .with_keep_alive(std::time::Duration::from_secs(5), std::time::Duration::from_secs(3));
    Ok(etcd_client::Client::connect(endpoints, Some(options)).await?)
}

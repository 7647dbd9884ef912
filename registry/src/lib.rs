//! infera-registry: workers registered in etcd and watched by control.
//!
//! - [`client`]: how a part reaches etcd ([`EtcdConfig`]: endpoints, TLS, credentials), checked
//!   at start and read again on every connection; [`cli`]: the flags every part takes for it.
//! - [`roles`]: the etcd roles each part needs (least privilege), as data and as an etcdctl
//!   script.
//! - [`keys`]: the key layout, in one place (`/infera/v1/workers/{id}`, `/infera/v1/config/…`).
//! - [`register`]: a worker record bound to a lease (TTL 10 s, keep-alive every TTL/3), kept
//!   alive by whoever registers the worker; lease gone ⇒ key gone ⇒ worker gone.
//! - [`drain`]: a worker drained before it stops — the registrar's request, control's report of
//!   what the ledger still holds on it, the registrar's wait.
//! - [`config`]: persisted admin settings (`/infera/v1/config/{name}`).
//! - [`watch`]: the prefix watched from a revision, resumed after errors and compaction; a
//!   resync is applied as a diff ([`diff`]), never a drop-all; an outage keeps the last view.
//!
//! The real etcd the tests run against (plain, or with TLS, client certificates and auth with
//! infera's roles) is the test kit's: `infera_testkit::etcd`.

pub mod cli;
pub mod client;
pub mod config;
pub mod diff;
pub mod drain;
mod error;
pub mod keys;
pub mod register;
pub mod retire;
pub mod roles;
pub mod watch;

pub use diff::Change;
pub use register::Registration;
pub use watch::watch_workers;

pub use client::{EtcdConfig, EtcdConfigError, EtcdSecurity, connect, reach};
pub use error::{EtcdFailure, RegistryError};

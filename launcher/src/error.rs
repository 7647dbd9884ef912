//! What stops the launcher before anything starts (exit 64).

use crate::check::Invalid;
use crate::deployment::LoadError;
use crate::hosts::HostError;

/// A deployment that cannot be launched.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Unreadable, not TOML, or not this format.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Values that cannot work together.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// `up`: workers that cannot run on this node, or node flags without etcd.
    #[error(transparent)]
    Host(#[from] HostError),
    /// `up`: etcd settings that do not go together, or a file of theirs that cannot be used
    /// (the launcher's `--etcd-*` flags, or `[router.etcd]`).
    #[error("etcd: {0}")]
    Etcd(#[from] infera_registry::EtcdConfigError),
    /// `up`: a `--log` filter (or `RUST_LOG`) that does not parse.
    #[error(transparent)]
    Telemetry(#[from] infera_runtime::telemetry::LogFilterError),
}

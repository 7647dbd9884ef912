//! Control's TLS at run time: the client configuration a follower reaches the leader with
//! ([`PeerTls`]), and what reading the server's and the peers' files again on SIGHUP
//! ([`crate::reload`]) counts (a file that does not load is logged and counted, and what is in
//! force stays).

use std::sync::{Arc, RwLock};

use infera_runtime::serve::tls::{ClientFiles, TlsError};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tonic::transport::ClientTlsConfig;

/// The TLS of this replica's channels to the other replicas, replaced on reload.
#[derive(Debug)]
pub struct PeerTls {
    files: ClientFiles,
    config: RwLock<Arc<ClientTlsConfig>>,
}

impl PeerTls {
    /// From `files`, read now.
    pub fn new(files: ClientFiles) -> Result<Self, TlsError> {
        let config = RwLock::new(Arc::new(files.tonic()?));
        Ok(Self { files, config })
    }

    /// The configuration in force: a caller that keeps a channel compares it by pointer to
    /// know when to make a new one.
    pub fn current(&self) -> Arc<ClientTlsConfig> {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the files again; on an error the configuration in force stays.
    pub(crate) fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(self.files.tonic()?);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    which: &'static str,
    outcome: &'static str,
}

/// `infera_control_tls_reloads_total{which,outcome}`.
#[derive(Clone, Debug, Default)]
pub struct TlsMetrics {
    reloads: Family<ReloadLabels, Counter>,
}

impl TlsMetrics {
    /// Registers the counter in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.sub_registry_with_prefix("infera_control").register(
            "tls_reloads",
            "Reloads of the TLS files on SIGHUP, by which (server: --tls-cert, --tls-client-ca; \
             peers: --tls-peer-ca) and outcome: ok, error (the files in force stay)",
            m.reloads.clone(),
        );
        m
    }

    /// Counts (and logs) one reload of `which`.
    pub(crate) fn reloaded(&self, which: &'static str, result: &Result<(), TlsError>) {
        let outcome = if result.is_ok() { "ok" } else { "error" };
        self.reloads.get_or_create(&ReloadLabels { which, outcome }).inc();
        if let Err(e) = result {
            tracing::warn!(which, error = %e, "TLS files not reloaded: the ones in force stay");
        }
    }
}

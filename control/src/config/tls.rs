//! The TLS flags: control's gRPC over TLS (certificate and key read again on SIGHUP), client
//! certificates required of every caller with `--tls-client-ca` (mutual TLS: proxies and
//! operators alike), and how a follower verifies the leader it forwards Admin calls to.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args as ClapArgs;
use infera_runtime::serve::tls::{Alpn, ClientFiles, IdentityFiles, ServerFiles, ServerTls, TlsError};

use crate::tls::PeerTls;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "TLS")]
pub(super) struct TlsArgs {
    /// Serve gRPC over TLS with this certificate chain (PEM, leaf first); the advertised URL
    /// becomes `https://`. Read again on SIGHUP: new connections get the new certificate.
    #[arg(long, env = "INFERA_CONTROL_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "INFERA_CONTROL_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require a client certificate signed by this CA (PEM bundle) of every caller: proxies
    /// (`--control-cert`), operators (grpcurl `-cert`/`-key`) and the other replicas, to which
    /// this replica shows its own --tls-cert.
    #[arg(long, env = "INFERA_CONTROL_TLS_CLIENT_CA", value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// The CA bundle (PEM) that verifies the other replicas' certificates when a follower
    /// forwards an Admin call to the leader; unset, the system's roots.
    #[arg(long, env = "INFERA_CONTROL_TLS_PEER_CA", value_name = "FILE", requires = "tls_cert")]
    tls_peer_ca: Option<PathBuf>,
}

/// Control's TLS: its server side, and how it reaches the other replicas.
#[derive(Clone, Debug)]
pub struct ControlTls {
    /// The gRPC listener's configuration, reloadable.
    pub server: Arc<ServerTls>,
    /// To the leader a follower forwards to, reloadable.
    pub peers: Arc<PeerTls>,
}

impl TlsArgs {
    /// The files read and checked (`None` without --tls-cert).
    pub(super) fn into_config(self) -> Result<Option<ControlTls>, TlsError> {
        let (Some(cert), Some(key)) = (self.tls_cert, self.tls_key) else { return Ok(None) };
        // A leader that asks for client certificates gets this replica's own.
        let identity =
            self.tls_client_ca.is_some().then(|| IdentityFiles { cert: cert.clone(), key: key.clone() });
        let peers =
            Arc::new(PeerTls::new(ClientFiles { ca: self.tls_peer_ca, identity, server_name: None })?);
        let server = ServerTls::load(ServerFiles { cert, key, client_ca: self.tls_client_ca }, Alpn::Grpc)?;
        Ok(Some(ControlTls { server: Arc::new(server), peers }))
    }
}

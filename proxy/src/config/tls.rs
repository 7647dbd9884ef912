//! The TLS flags: HTTPS on the proxy's own listener (optionally with client certificates), and
//! how the proxy verifies an `https://` control and identifies itself to it (mutual TLS). Every
//! file is read at start, so a bad one stops the proxy with its name, and again on SIGHUP.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args as ClapArgs;
use infera_runtime::serve::tls::{Alpn, ClientFiles, IdentityFiles, ServerFiles, ServerTls, TlsError};

use super::ConfigError;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "TLS")]
pub(super) struct TlsArgs {
    /// Serve the API over HTTPS (HTTP/2 and HTTP/1.1 by ALPN) with this certificate chain (PEM,
    /// leaf first). Read again on SIGHUP: new connections get the new certificate.
    #[arg(long, env = "INFERA_PROXY_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "INFERA_PROXY_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require a client certificate signed by this CA (PEM bundle) on every API connection
    /// (mutual TLS).
    #[arg(long, env = "INFERA_PROXY_TLS_CLIENT_CA", value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// The CA bundle (PEM) that verifies an `https://` control; unset, the system's roots.
    #[arg(long, env = "INFERA_PROXY_CONTROL_CA", value_name = "FILE")]
    control_ca: Option<PathBuf>,
    /// The client certificate (PEM) shown to an `https://` control that requires one (its
    /// `--tls-client-ca`).
    #[arg(long, env = "INFERA_PROXY_CONTROL_CERT", value_name = "FILE", requires = "control_key")]
    control_cert: Option<PathBuf>,
    /// The private key of --control-cert (PEM).
    #[arg(long, env = "INFERA_PROXY_CONTROL_KEY", value_name = "FILE", requires = "control_cert")]
    control_key: Option<PathBuf>,
    /// The name to verify in control's certificate instead of each URL's host (for example when
    /// control's certificate names a service and the URLs are addresses).
    #[arg(long, env = "INFERA_PROXY_CONTROL_SERVER_NAME", value_name = "NAME")]
    control_server_name: Option<String>,
}

/// The proxy's TLS, both sides.
#[derive(Clone, Debug, Default)]
pub struct TlsConfig {
    /// HTTPS on the listener (`--tls-cert`), reloadable.
    pub listener: Option<Arc<ServerTls>>,
    /// How to reach an `https://` control; `Some` when a control URL is `https://`.
    pub control: Option<ControlTls>,
}

/// How the proxy reaches an `https://` control: the files (read again on SIGHUP) and the
/// configuration made from them at start.
#[derive(Clone, Debug)]
pub struct ControlTls {
    /// The CA, the client certificate and the name to verify.
    pub files: ClientFiles,
    /// Made from `files` when the proxy started.
    pub config: tonic::transport::ClientTlsConfig,
}

fn tls_error(flags: &'static str) -> impl Fn(TlsError) -> ConfigError {
    move |source| ConfigError::Tls { flags, source }
}

impl TlsArgs {
    /// The files read and checked; `https` says whether any control URL is `https://`.
    pub(super) fn into_config(self, https: bool) -> Result<TlsConfig, ConfigError> {
        let listener = match (self.tls_cert, self.tls_key) {
            (Some(cert), Some(key)) => {
                let files = ServerFiles { cert, key, client_ca: self.tls_client_ca };
                let tls = ServerTls::load(files, Alpn::Http).map_err(tls_error("--tls-cert/--tls-key"))?;
                Some(Arc::new(tls))
            }
            _ => None,
        };
        let identity = match (self.control_cert, self.control_key) {
            (Some(cert), Some(key)) => Some(IdentityFiles { cert, key }),
            _ => None,
        };
        let client = ClientFiles { ca: self.control_ca, identity, server_name: self.control_server_name };
        if !https {
            if client != ClientFiles::default() {
                return Err(ConfigError::ControlTlsWithoutHttps);
            }
            return Ok(TlsConfig { listener, control: None });
        }
        let config = client.tonic().map_err(tls_error("--control-ca/--control-cert/--control-key"))?;
        Ok(TlsConfig { listener, control: Some(ControlTls { files: client, config }) })
    }
}

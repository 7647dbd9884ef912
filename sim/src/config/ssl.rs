//! SGLang's HTTPS flags (`--ssl-certfile`, `--ssl-keyfile`, `--ssl-ca-certs`; SGLang 0.5.23
//! `python/sglang/srt/arg_groups/fields/server.py`, served by uvicorn): with a certificate the
//! emulator serves its API over TLS, and with a CA it requires client certificates signed by it.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use infera_runtime::serve::tls::ServerFiles;

#[derive(ClapArgs, Debug, Clone)]
#[command(next_help_heading = "SGLang HTTPS")]
pub(super) struct SslArgs {
    /// Serve the API over HTTPS with this certificate chain (PEM).
    #[arg(long, env = "INFERA_SIM_SSL_CERTFILE", requires = "ssl_keyfile")]
    ssl_certfile: Option<PathBuf>,
    /// The private key of --ssl-certfile (PEM).
    #[arg(long, env = "INFERA_SIM_SSL_KEYFILE", requires = "ssl_certfile")]
    ssl_keyfile: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM).
    #[arg(long, env = "INFERA_SIM_SSL_CA_CERTS", requires = "ssl_certfile")]
    ssl_ca_certs: Option<PathBuf>,
}

impl SslArgs {
    /// The files of an HTTPS listener, when one is asked for.
    pub(super) fn files(&self) -> Option<ServerFiles> {
        let (cert, key) = (self.ssl_certfile.clone()?, self.ssl_keyfile.clone()?);
        Some(ServerFiles { cert, key, client_ca: self.ssl_ca_certs.clone() })
    }
}

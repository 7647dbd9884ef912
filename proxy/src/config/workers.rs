//! How the proxy reaches `https://` workers (SGLang started with `--ssl-certfile`): the CA that
//! verifies them and, when they require one (`--ssl-ca-certs`), the certificate it shows them.
//! A worker whose record says `https://` is never sent a request in plain text.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use infera_runtime::serve::worker_client::WorkerTlsFiles;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Worker TLS")]
pub(super) struct WorkerTlsArgs {
    /// The CA bundle (PEM) that verifies `https://` workers. Without it a request to an
    /// `https://` worker fails (it is never sent in plain text).
    #[arg(long, env = "INFERA_PROXY_WORKER_CA", value_name = "FILE")]
    worker_ca: Option<PathBuf>,
    /// The client certificate (PEM) shown to workers that require one.
    #[arg(long, env = "INFERA_PROXY_WORKER_CERT", value_name = "FILE", requires_all = ["worker_key", "worker_ca"])]
    worker_cert: Option<PathBuf>,
    /// The private key of --worker-cert (PEM).
    #[arg(long, env = "INFERA_PROXY_WORKER_KEY", value_name = "FILE", requires = "worker_cert")]
    worker_key: Option<PathBuf>,
}

impl WorkerTlsArgs {
    /// The files, when `https://` workers are to be reached.
    pub(super) fn files(self) -> Option<WorkerTlsFiles> {
        WorkerTlsFiles::from_flags(self.worker_ca, self.worker_cert, self.worker_key)
    }
}

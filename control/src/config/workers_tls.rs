//! How control reaches `https://` workers (SGLang started with `--ssl-certfile`) to read their
//! `/server_info` and `/v1/loads`: the CA that verifies them and, when they require one, the
//! certificate it shows them. An `https://` worker is never read in plain text.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use infera_runtime::serve::worker_client::WorkerTlsFiles;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Worker TLS")]
pub(super) struct WorkerTlsArgs {
    /// The CA bundle (PEM) that verifies `https://` workers. Without it an `https://` worker's
    /// engine cannot be read, so it never becomes a target.
    #[arg(long, env = "INFERA_CONTROL_WORKER_CA", value_name = "FILE")]
    worker_ca: Option<PathBuf>,
    /// The client certificate (PEM) shown to workers that require one.
    #[arg(long, env = "INFERA_CONTROL_WORKER_CERT", value_name = "FILE", requires_all = ["worker_key", "worker_ca"])]
    worker_cert: Option<PathBuf>,
    /// The private key of --worker-cert (PEM).
    #[arg(long, env = "INFERA_CONTROL_WORKER_KEY", value_name = "FILE", requires = "worker_cert")]
    worker_key: Option<PathBuf>,
}

impl WorkerTlsArgs {
    /// The files, when `https://` workers are to be read.
    pub(super) fn files(self) -> Option<WorkerTlsFiles> {
        WorkerTlsFiles::from_flags(self.worker_ca, self.worker_cert, self.worker_key)
    }
}

//! Spawning the binary on port 0 and waiting for its "listening" line.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

pub(crate) const WORKERS: &str = "[[workers]]\nid = 'p'\nrole = 'prefill'\nurl = 'http://127.0.0.1:30000'\nmodel = 'm'\ndp_size = 1\n\
     [[workers]]\nid = 'd'\nrole = 'decode'\nurl = 'http://127.0.0.1:30001'\nmodel = 'm'\ndp_size = 4\n";

/// [`WORKERS`] with each worker's URL an engine stub's (control routes to a worker only once its
/// `/server_info` has answered), kept as long as the value, with the runtime serving the stubs.
pub(crate) struct StubbedWorkers {
    /// The workers file.
    pub(crate) file: tempfile::NamedTempFile,
    _engines: infera_testkit::EngineStubs,
    _rt: tokio::runtime::Runtime,
}

/// [`StubbedWorkers`] of [`WORKERS`].
pub(crate) fn stubbed_workers() -> StubbedWorkers {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let registered = infera_control::workers_file::parse(WORKERS, std::path::Path::new("WORKERS")).unwrap();
    let engines = rt.block_on(infera_testkit::EngineStubs::start(registered)).unwrap();
    let file = workers_file(&infera_launcher::records::workers_file(&engines.records));
    StubbedWorkers { file, _engines: engines, _rt: rt }
}

/// A workers file that lives as long as the value.
pub(crate) fn workers_file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

pub(crate) fn command(workers: &tempfile::NamedTempFile) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_infera-control"));
    cmd.args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--workers"])
        .arg(workers.path())
        .env_remove("INFERA_DECODE_INPUT_DEMAND")
        .env_remove("INFERA_DECODE_REQUEST_WEIGHT")
        .env_remove("INFERA_ADMIN_TOKEN")
        .env("INFERA_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

/// A running control process; killed on drop.
pub(crate) struct Running {
    pub(crate) child: Child,
    pub(crate) grpc: SocketAddr,
    pub(crate) metrics: SocketAddr,
    /// `admin=`, printed with `--admin-listen`.
    pub(crate) admin: Option<SocketAddr>,
}

impl Running {
    /// Spawns and waits for `infera-control listening grpc=… metrics=…[ admin=…]` on stdout.
    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let field = |key: &str| -> Option<SocketAddr> {
            let rest = line.split(key).nth(1)?;
            Some(rest.split_whitespace().next().unwrap().parse().unwrap())
        };
        let addr = |key: &str| field(key).unwrap_or_else(|| panic!("no {key} in {line:?}"));
        let (grpc, metrics, admin) = (addr(" grpc="), addr(" metrics="), field(" admin="));
        Self { child, grpc, metrics, admin }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// Waits (bounded) until `Admin/ListTargets` lists `n` targets.
    pub(crate) fn wait_targets(&self, n: usize) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let url = self.url();
        rt.block_on(infera_testkit::eventually(
            Duration::from_secs(30),
            &format!("{n} targets listed"),
            async || {
                let Ok(mut admin) = infera_proto::pb::admin_client::AdminClient::connect(url.clone()).await
                else {
                    return false;
                };
                let rows = admin.list_targets(infera_proto::pb::ListTargetsRequest::default()).await;
                rows.is_ok_and(|r| r.into_inner().targets.len() == n)
            },
        ));
    }

    /// SIGTERM, then the exit status (bounded wait).
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let ok = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
        wait(&mut self.child, Duration::from_secs(20))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for a child to exit, failing the test after `limit`.
pub(crate) fn wait(child: &mut Child, limit: Duration) -> ExitStatus {
    infera_testkit::eventually_blocking(limit, "the process to exit", || child.try_wait().unwrap())
}

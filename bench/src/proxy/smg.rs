//! SMG, the peer gateway, as a third side of the proxy bench: `smg launch --worker-urls SIM
//! --dp-aware` in front of the same sim, pinned like the proxy (`--proxy-cpus`), so that both
//! gateways are measured against going direct in the same run.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::placement::Placement;

/// A running SMG; killed on drop.
pub(super) struct SmgProcess {
    child: Child,
    /// Its router's `host:port`.
    pub(super) addr: String,
}

impl Drop for SmgProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SmgProcess {
    /// Starts `program` in front of the worker at `worker` (its DP ranks found with
    /// `--dp-aware`), round-robin as the proxy's fallback is, output to `log`.
    pub(super) fn start(
        program: &Path,
        worker: &str,
        placement: &Placement,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let free = || -> anyhow::Result<u16> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
        };
        let (port, metrics) = (free()?, free()?);
        let out = std::fs::File::create(log)?;
        let mut cmd = Command::new(program);
        cmd.args(["launch", "--host", "127.0.0.1", "--port", &port.to_string(), "--worker-urls", worker])
            .args(["--policy", "round_robin", "--dp-aware", "--prometheus-host", "127.0.0.1"])
            .args(["--prometheus-port", &metrics.to_string(), "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = placement.spawn(&mut cmd)?;
        Ok(Self { child, addr: format!("127.0.0.1:{port}") })
    }

    /// The process id (for the placement check).
    pub(super) fn id(&self) -> u32 {
        self.child.id()
    }
}

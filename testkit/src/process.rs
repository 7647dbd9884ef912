//! A workspace binary as a real child process, on port 0: started, its addresses read from the
//! one `… listening key=addr …` line every infera binary prints, and then killed (SIGKILL),
//! terminated (SIGTERM), paused (SIGSTOP) and resumed (SIGCONT), or restarted with the same
//! flags on the same ports it was given the first time.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::eventually::poll_blocking;

/// How long a process may take to print its listening line, and to exit.
const DEADLINE: Duration = Duration::from_secs(30);
/// The last bytes of stderr kept for error messages.
const STDERR_TAIL: usize = 8 * 1024;

/// The directory of the workspace's binaries: `INFERA_BIN_DIR` (what `cargo xtask test` sets),
/// else `target/debug` of this workspace.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("INFERA_BIN_DIR").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("testkit is in the workspace")
                .join("target/debug")
        },
        PathBuf::from,
    )
}

/// A workspace binary by name (`infera-sim`, `infera-control`, `infera-proxy`, …).
///
/// # Errors
/// When it is not built.
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir().join(name);
    if !path.is_file() {
        bail!("{} is missing: build it (cargo build -p {name}) or set INFERA_BIN_DIR", path.display());
    }
    Ok(path)
}

/// Sets `flag`'s value in `args`: the token after its first occurrence, or `flag value`
/// appended when it is not there (or has no value yet).
pub(crate) fn set_flag(args: &mut Vec<String>, flag: &str, value: String) {
    match args.iter().position(|a| a == flag) {
        Some(i) if i + 1 < args.len() => args[i + 1] = value,
        _ => args.extend([flag.to_owned(), value]),
    }
}

/// How a flag's value is rewritten on restart from what the first start printed.
#[derive(Clone, Debug)]
pub struct Rebind {
    /// The flag whose value follows it in the argv, e.g. `--listen`.
    pub flag: &'static str,
    /// The key of the listening line, e.g. `grpc=`.
    pub key: &'static str,
    /// The whole address, or its port only.
    pub port_only: bool,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    /// Shown in errors.
    pub name: String,
    /// The program's path.
    pub program: PathBuf,
    /// Its arguments (ports 0 where the OS should pick).
    pub args: Vec<String>,
    /// Variables set on top of this process's environment.
    pub env: BTreeMap<String, String>,
    /// The flags that keep their first address on restart.
    pub rebind: Vec<Rebind>,
}

/// A running (or stopped) child process; killed on drop.
#[derive(Debug)]
pub struct Process {
    spec: ProcessSpec,
    child: Option<Child>,
    addrs: BTreeMap<String, String>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Process {
    /// Starts `spec` and waits (bounded) for its listening line.
    ///
    /// # Errors
    /// When it cannot start or exits or says nothing before the deadline.
    pub fn start(spec: ProcessSpec) -> anyhow::Result<Self> {
        let mut p = Self { spec, child: None, addrs: BTreeMap::new(), stderr: Arc::default() };
        p.launch()?;
        Ok(p)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let spec = &self.spec;
        let mut child = Command::new(&spec.program)
            .args(&spec.args)
            .envs(&spec.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} ({})", spec.name, spec.program.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (line_tx, line_rx) = mpsc::channel();
        // Both pipes are drained for the child's whole life, so it never blocks on a full one.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref().map_while(Result::ok) {
                if line.contains(" listening ") {
                    let _ = line_tx.send(line);
                    break;
                }
            }
            lines.for_each(drop);
        });
        let tail = self.stderr.clone();
        tail.lock().expect("stderr lock").clear();
        std::thread::spawn(move || {
            let mut stderr = stderr;
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut t = tail.lock().expect("stderr lock");
                t.extend_from_slice(&buf[..n]);
                let excess = t.len().saturating_sub(STDERR_TAIL);
                t.drain(..excess);
            }
        });
        self.child = Some(child);
        let line = match line_rx.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(_) => {
                let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                bail!(
                    "{} printed no listening line within {DEADLINE:?} (exit: {status:?}); stderr:\n{}",
                    self.spec.name,
                    self.stderr_tail()
                );
            }
        };
        self.addrs = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (format!("{k}="), v.to_owned()))
            .collect();
        Ok(())
    }

    /// The address printed after `key` (e.g. `"http="`).
    ///
    /// # Panics
    /// When the listening line had no such key, or it is not an address.
    pub fn addr(&self, key: &str) -> SocketAddr {
        let text = self
            .addrs
            .get(key)
            .unwrap_or_else(|| panic!("{} printed no {key}: {:?}", self.spec.name, self.addrs));
        text.parse().unwrap_or_else(|e| panic!("{} {key}{text}: {e}", self.spec.name))
    }

    /// The address after `key`, when the line had one that parses.
    pub fn try_addr(&self, key: &str) -> Option<SocketAddr> {
        self.addrs.get(key)?.parse().ok()
    }

    /// The child's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the process wrote on stderr lately.
    pub fn stderr_tail(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr lock")).into_owned()
    }

    fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let pid = self.pid().with_context(|| format!("{} is not running", self.spec.name))?;
        let ok = Command::new("kill").args([sig, &pid.to_string()]).status()?.success();
        anyhow::ensure!(ok, "kill {sig} {pid} ({}) failed", self.spec.name);
        Ok(())
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits (bounded) for it to exit.
    ///
    /// # Errors
    /// When it does not exit in time (it is killed then).
    pub fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        self.signal("-TERM")?;
        let mut child = self.child.take().expect("running: signal checked");
        let waited = poll_blocking(DEADLINE, &format!("{} to exit", self.spec.name), || {
            child.try_wait().ok().flatten()
        });
        match waited {
            Ok(status) => Ok(status),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e.into())
            }
        }
    }

    /// SIGSTOP: the process stays, and answers nothing.
    ///
    /// # Errors
    /// When it is not running.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal("-STOP")
    }

    /// SIGHUP (a proxy reads its API keys again).
    ///
    /// # Errors
    /// When it is not running.
    pub fn hangup(&self) -> anyhow::Result<()> {
        self.signal("-HUP")
    }

    /// SIGCONT after [`Process::pause`].
    ///
    /// # Errors
    /// When it is not running.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal("-CONT")
    }

    /// Starts it again (killing it first if it still runs) with the same flags, each address
    /// of [`ProcessSpec::rebind`] pinned to what the first start printed.
    ///
    /// # Errors
    /// As [`Process::start`].
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        for r in self.spec.rebind.clone() {
            let Some(addr) = self.try_addr(r.key) else { continue };
            let value = if r.port_only { addr.port().to_string() } else { addr.to_string() };
            set_flag(&mut self.spec.args, r.flag, value);
        }
        self.launch()
    }

    /// The arguments it runs (or last ran) with.
    pub fn args(&self) -> &[String] {
        &self.spec.args
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A paused child ignores SIGTERM but not SIGKILL.
        self.kill();
    }
}

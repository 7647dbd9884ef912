//! One child process of `up`: spawned with its output forwarded to the launcher's stderr
//! (each line prefixed `[name]`), the last lines of its stderr kept for failure reports, its
//! `… listening …` stdout line captured, and a bounded stop (SIGTERM, then SIGKILL).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Lines of stderr kept for a failure report.
pub const TAIL_LINES: usize = 20;

/// A running child.
#[derive(Debug)]
pub struct Child {
    name: String,
    pid: u32,
    inner: tokio::process::Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    listening: watch::Receiver<Option<String>>,
    readers: Vec<JoinHandle<()>>,
}

/// How long the output readers may lag the exit (a grandchild can hold the pipes open).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

impl Child {
    /// Starts `program args…` with `env` on top of the launcher's environment.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &BTreeMap<String, String>,
    ) -> std::io::Result<Self> {
        let mut inner = Command::new(program)
            .args(args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = inner.id().unwrap_or(0);
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let (found, listening) = watch::channel(None);
        let mut readers = Vec::new();
        if let Some(out) = inner.stdout.take() {
            readers.push(tokio::spawn(forward(name.to_owned(), out, None, Some(found))));
        }
        if let Some(err) = inner.stderr.take() {
            readers.push(tokio::spawn(forward(name.to_owned(), err, Some(tail.clone()), None)));
        }
        Ok(Self { name: name.to_owned(), pid, inner, tail, listening, readers })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for the child to exit and (bounded) for its output to be read to the end.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.inner.wait().await?;
        for reader in &mut self.readers {
            if !reader.is_finished() {
                let _ = tokio::time::timeout(DRAIN_TIMEOUT, reader).await;
            }
        }
        Ok(status)
    }

    /// The child's `listening` line (`infera-control listening grpc=… metrics=…`), once printed;
    /// `None` when it exited first.
    pub async fn listening(&mut self) -> Option<String> {
        let mut rx = self.listening.clone();
        tokio::select! {
            line = rx.wait_for(Option::is_some) => return line.ok().and_then(|l| l.clone()),
            _ = self.inner.wait() => {}
        }
        // The exit can be seen before the stdout reader has read the last lines: let it reach
        // the end (its sender drops) or find the line, bounded as in `wait`.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, rx.wait_for(Option::is_some)).await;
        self.listening.borrow().clone()
    }

    /// The last lines of its stderr, oldest first.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default()
    }

    /// Stops the child: SIGTERM, then SIGKILL after `grace`. Returns how it ended.
    pub async fn stop(&mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.inner.try_wait()? {
            return Ok(status);
        }
        if let Some(pid) = i32::try_from(self.pid).ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        match tokio::time::timeout(grace, self.inner.wait()).await {
            Ok(status) => status,
            Err(_) => {
                eprintln!("infera-launch: {}: no exit {grace:?} after SIGTERM; sending SIGKILL", self.name);
                self.inner.start_kill()?;
                self.inner.wait().await
            }
        }
    }
}

async fn forward(
    name: String,
    from: impl AsyncRead + Unpin,
    tail: Option<Arc<Mutex<VecDeque<String>>>>,
    listening: Option<watch::Sender<Option<String>>>,
) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        eprintln!("[{name}] {line}");
        if let Some(tx) = &listening
            && tx.borrow().is_none()
            && line.contains(" listening ")
        {
            let _ = tx.send(Some(line.clone()));
        }
        if let Some(tail) = &tail
            && let Ok(mut t) = tail.lock()
        {
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(line);
        }
    }
}

/// The value of `key=` in a listening line (`http=127.0.0.1:8000`).
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_fields_are_read() {
        let line = "infera-control listening grpc=127.0.0.1:5 metrics=127.0.0.1:6";
        assert_eq!(field(line, "grpc"), Some("127.0.0.1:5"));
        assert_eq!(field(line, "metrics"), Some("127.0.0.1:6"));
        assert_eq!(field(line, "http"), None);
    }

    #[tokio::test]
    async fn stderr_tail_and_exit_status_are_kept() {
        let script = "echo 'x listening http=1'; for i in $(seq 1 30); do echo line$i >&2; done; exit 3";
        let mut c =
            Child::spawn("t", Path::new("sh"), &["-c".into(), script.into()], &BTreeMap::new()).unwrap();
        assert_eq!(c.listening().await.as_deref(), Some("x listening http=1"));
        let status = c.wait().await.unwrap();
        assert_eq!(status.code(), Some(3));
        let tail = c.stderr_tail();
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail[0], "line11");
    }

    #[tokio::test]
    async fn stop_terminates_then_kills() {
        let mut polite = Child::spawn("p", Path::new("sleep"), &["30".into()], &BTreeMap::new()).unwrap();
        let status = polite.stop(Duration::from_secs(10)).await.unwrap();
        assert!(!status.success());
        let script = "trap '' TERM; echo ' listening '; while true; do sleep 0.05; done";
        let mut stubborn =
            Child::spawn("s", Path::new("sh"), &["-c".into(), script.into()], &BTreeMap::new()).unwrap();
        stubborn.listening().await; // the trap is set
        let status = stubborn.stop(Duration::from_millis(200)).await.unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    }
}

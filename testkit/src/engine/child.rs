//! A real SGLang server as a child process: spawned so that it cannot outlive the test process,
//! ready when it says so in its log, stopped (SIGTERM, then SIGKILL) or killed.
//!
//! SGLang's `launch_server` starts its scheduler and detokenizer as processes that SIGKILL
//! themselves when it dies (`kill_itself_when_parent_died`, `sglang/srt/utils/common.py`); it is
//! itself started under `setpriv --pdeathsig KILL`, so it dies with the thread that forked it.
//! That thread is the kit's one spawner thread, which lives as long as the test process: servers
//! kept in a `static` for a whole test binary go when the binary exits, however it exits.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// What SGLang logs once its warm-up request has been served (`sglang/srt/entrypoints/http_server.py`,
/// `_wait_and_warmup`).
const READY_LINE: &str = "The server is fired up and ready to roll!";
/// Log lines kept for error messages.
const LOG_TAIL: usize = 60;

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct ChildSpec {
    /// Shown in errors.
    pub name: String,
    /// `python -m sglang.launch_server …`.
    pub argv: Vec<String>,
    /// Set on top of this process's environment.
    pub env: Vec<(String, String)>,
}

/// A running SGLang server; SIGKILLed on drop.
#[derive(Debug)]
pub(crate) struct EngineChild {
    name: String,
    child: Option<Child>,
    log: Arc<Mutex<VecDeque<String>>>,
}

type Job = Box<dyn FnOnce() + Send>;

/// The one thread every server is forked from (see the module's comment). It never exits.
fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sglang-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .expect("spawn the spawner thread");
        Mutex::new(tx)
    })
}

fn spawn_from_keeper(mut cmd: Command) -> std::io::Result<Child> {
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(cmd.spawn());
    });
    spawner().lock().expect("spawner lock").send(job).expect("the spawner thread lives");
    rx.recv().expect("the spawner answers")
}

impl EngineChild {
    /// Starts `spec` and waits (bounded by `deadline`) for SGLang's ready line.
    ///
    /// # Errors
    /// When it cannot start, exits, or is not ready in time (it is killed then).
    pub(crate) fn start(spec: &ChildSpec, deadline: Duration) -> anyhow::Result<Self> {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--"]).args(&spec.argv);
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = spawn_from_keeper(cmd)
            .with_context(|| format!("cannot start {} ({:?})", spec.name, spec.argv))?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        for pipe in [drain(child.stdout.take()), drain(child.stderr.take())].into_iter().flatten() {
            let (log, ready) = (log.clone(), ready_tx.clone());
            std::thread::spawn(move || scan(pipe, &log, &ready));
        }
        drop(ready_tx);
        let mut me = Self { name: spec.name.clone(), child: Some(child), log };
        let start = Instant::now();
        loop {
            match ready_rx.recv_timeout(Duration::from_millis(200)) {
                Ok(()) => return Ok(me),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = me.wait_exit(Duration::from_secs(5));
                    bail!("{} exited before it was ready ({status:?}); its log:\n{}", me.name, me.log_tail());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Some(status) = me.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("{} exited before it was ready ({status}); its log:\n{}", me.name, me.log_tail());
            }
            // Uvicorn failing to bind leaves SGLang's schedulers running: no exit to wait for.
            let tail = me.log_tail();
            if tail.contains("address already in use") {
                me.kill();
                bail!("{} could not bind a port (address already in use); its log:\n{tail}", me.name);
            }
            if start.elapsed() > deadline {
                me.kill();
                bail!("{} was not ready within {deadline:?}; its log:\n{tail}", me.name);
            }
        }
    }

    /// Its pid while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it still runs.
    pub(crate) fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// The last lines it logged.
    pub(crate) fn log_tail(&self) -> String {
        self.log.lock().expect("log lock").iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// SIGTERM, then SIGKILL after `grace`; reaps it.
    pub(crate) fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let pid = self.pid()?;
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        let status = self.wait_exit(grace);
        if status.is_none() {
            self.kill();
        }
        status
    }

    /// SIGKILL, and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Some(status) = self.child.as_mut()?.try_wait().ok().flatten() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for EngineChild {
    fn drop(&mut self) {
        self.kill();
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Option<Box<dyn Read + Send>> {
    pipe.map(|p| Box::new(p) as Box<dyn Read + Send>)
}

/// Keeps the pipe's last lines and says when the ready line passes; reads to the end, so the
/// server never blocks on a full pipe.
fn scan(pipe: Box<dyn Read + Send>, log: &Mutex<VecDeque<String>>, ready: &mpsc::Sender<()>) {
    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
        if line.contains(READY_LINE) {
            let _ = ready.send(());
        }
        let mut log = log.lock().expect("log lock");
        log.push_back(line);
        if log.len() > LOG_TAIL {
            log.pop_front();
        }
    }
}

/// Where the CPU stand-ins live (`testkit/sglang_cpu/pythonpath`).
pub(crate) fn cpu_pythonpath() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sglang_cpu/pythonpath")
}

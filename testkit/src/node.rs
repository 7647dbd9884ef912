//! One running part of a deployment, however it runs: a task in this process or a child.

use crate::process::Process;
use crate::server::Server;

/// How a part runs.
#[derive(Debug)]
pub enum Node {
    /// A task in this process (`run(listeners, config, shutdown)`).
    InProcess(Server),
    /// A child process of the workspace's binary.
    Process(Process),
}

impl Node {
    /// A graceful stop: shutdown for a task, SIGTERM for a process; bounded.
    ///
    /// # Errors
    /// When it fails, panics, exits non-zero or takes too long.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        match self {
            Self::InProcess(s) => s.stop().await,
            Self::Process(p) if p.pid().is_none() => Ok(()),
            Self::Process(p) => {
                // The wait polls the child from this thread: the process needs nothing of this runtime.
                let status = p.terminate()?;
                anyhow::ensure!(status.success(), "exited with {status}");
                Ok(())
            }
        }
    }

    /// A crash: the task aborted, or the process SIGKILLed.
    pub fn kill(&mut self) {
        match self {
            Self::InProcess(s) => s.abort(),
            Self::Process(p) => p.kill(),
        }
    }

    /// The child's pid, when it runs as one.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Self::InProcess(_) => None,
            Self::Process(p) => p.pid(),
        }
    }

    /// The child, when it runs as one.
    pub fn process(&mut self) -> Option<&mut Process> {
        match self {
            Self::InProcess(_) => None,
            Self::Process(p) => Some(p),
        }
    }
}

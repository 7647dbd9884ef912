//! An in-process server: a task running a crate's `run(listeners, config, shutdown)`, stopped
//! gracefully on request or aborted (a crash, as far as its peers can tell) on drop.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a server may take to stop.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// The `shutdown` future handed to a server's `run`: resolves when [`Server::stop`] is called.
#[derive(Debug)]
pub struct Shutdown(oneshot::Receiver<()>);

impl Future for Shutdown {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A dropped sender (the server handle gone) stops the server too.
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

/// A running in-process server.
#[derive(Debug)]
pub struct Server {
    name: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Server {
    /// Spawns `run(shutdown)` on the current runtime.
    pub fn spawn<F>(name: impl Into<String>, run: impl FnOnce(Shutdown) -> F) -> Self
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        Self { name: name.into(), stop: Some(stop), task: Some(tokio::spawn(run(Shutdown(stopped)))) }
    }

    /// Signals shutdown and waits (bounded) for `run` to return; its error, if any.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(task) = self.task.take() else { return Ok(()) };
        let name = &self.name;
        tokio::time::timeout(STOP_DEADLINE, task)
            .await
            .with_context(|| format!("{name} did not stop within {STOP_DEADLINE:?}"))?
            .with_context(|| format!("{name} panicked"))?
            .with_context(|| format!("{name} failed"))
    }

    /// Ends the task at once, without a graceful stop (a crash, as far as its peers can tell).
    pub fn abort(&mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Whether `run` has returned.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.abort();
    }
}

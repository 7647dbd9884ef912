//! How every binary serves HTTP and stops (feature `serve`): one shutdown signal that every
//! task of a server waits on ([`Stop`]), and one hyper accept loop (HTTP/1 and HTTP/2, no
//! Nagle) that stops accepting on it and lets open connections finish ([`serve_http`]). The
//! proxy's API, the sim's API and bootstrap ports and control's `/metrics` all run on it.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A server's shutdown signal, fired once; every clone and every [`Stop::wait`] sees it.
#[derive(Clone, Debug)]
pub struct Stop {
    // Never marked seen: every clone of it sees the one change (or the sender gone) as the stop.
    rx: watch::Receiver<()>,
}

impl Stop {
    /// A signal that fires when `shutdown` resolves (a task waits on it).
    pub fn on(shutdown: impl Future<Output = ()> + Send + 'static) -> Self {
        let (tx, rx) = watch::channel(());
        tokio::spawn(async move {
            shutdown.await;
            let _ = tx.send(());
        });
        Self { rx }
    }

    /// Resolves once the signal has fired (at once if it already has).
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            let _ = rx.changed().await;
        }
    }

    /// The underlying receiver, for code that takes a `watch::Receiver<()>`: its first
    /// `changed()` is the stop.
    pub fn receiver(&self) -> watch::Receiver<()> {
        self.rx.clone()
    }
}

/// How long open connections get once a server stops accepting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    /// Until every open connection has finished (a proxy's streams end on their own).
    Unbounded,
    /// At most this long; connections still open then are left to be dropped.
    For(Duration),
}

/// Serves `handler` on `listener` until `stop` resolves, then stops accepting and drains open
/// connections as `drain` says. Accept errors (e.g. too many open files) are logged and the
/// loop goes on.
pub async fn serve_http<H, F, B>(
    listener: TcpListener,
    handler: H,
    stop: impl Future<Output = ()>,
    drain: Drain,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let mut stop = std::pin::pin!(stop);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        // Small requests and streamed chunks: never wait for Nagle.
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = hyper::service::service_fn(move |req| {
            let response = handler(req);
            async move { Ok::<_, Infallible>(response.await) }
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    drop(listener);
    match drain {
        Drain::Unbounded => graceful.shutdown().await,
        Drain::For(limit) => {
            if tokio::time::timeout(limit, graceful.shutdown()).await.is_err() {
                tracing::warn!(?limit, "connections still open after the drain period");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::{BodyExt, Empty, Full};
    use hyper::body::Bytes;
    use hyper_util::client::legacy::Client;
    use tokio::sync::Notify;

    use super::*;

    #[tokio::test]
    async fn a_stopped_server_refuses_new_connections_and_finishes_what_it_serves() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (fire, fired) = tokio::sync::oneshot::channel::<()>();
        let stop = Stop::on(async move {
            let _ = fired.await;
        });
        // `/slow` says when it has arrived, then answers only once let go.
        let (arrived, let_go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let handler = {
            let (arrived, let_go) = (arrived.clone(), let_go.clone());
            move |req: Request<Incoming>| {
                let (arrived, let_go) = (arrived.clone(), let_go.clone());
                async move {
                    if req.uri().path() == "/slow" {
                        arrived.notify_one();
                        let_go.notified().await;
                    }
                    Response::new(Full::new(Bytes::from(req.uri().path().to_owned())))
                }
            }
        };
        let server = tokio::spawn(serve_http(listener, handler, stop.wait(), Drain::Unbounded));
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let get = |path: &str| client.get(format!("http://{addr}{path}").parse().unwrap());
        let body = get("/fast").await.unwrap().into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "/fast");
        let slow = tokio::spawn(get("/slow"));
        arrived.notified().await;
        fire.send(()).unwrap();
        stop.wait().await;
        let_go.notify_one();
        let answered = slow.await.unwrap().unwrap().into_body().collect().await.unwrap().to_bytes();
        assert_eq!(answered, "/slow", "an open request finishes after the stop");
        server.await.unwrap();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed");
        // A late clone of the signal sees the stop too.
        stop.clone().wait().await;
    }
}

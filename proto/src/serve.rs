//! How every binary serves HTTP and stops (feature `serve`): one shutdown signal that every
//! task of a server waits on ([`Stop`]), and one hyper accept loop (HTTP/1 and HTTP/2, no
//! Nagle) that stops accepting on it and lets open connections finish ([`serve_http`]), plain
//! or behind TLS (feature `tls`). The proxy's API, the sim's API and
//! bootstrap ports and control's `/metrics` all run on it.

#[cfg(feature = "tls")]
pub mod tls;
mod version;

pub use version::Speaks;

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
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

/// How an accepted TCP connection becomes the stream HTTP runs on: [`Plain`], or TLS
/// (`Arc<tls::ServerTls>`, feature `tls`).
pub trait Handshake: Clone + Send + Sync + 'static {
    /// The stream after the handshake.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The handshake of one connection.
    fn handshake(&self, tcp: TcpStream) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
    /// Which HTTP `io` speaks, when the handshake or its first bytes tell (`None`: hyper reads
    /// the preface itself). May wait for the client's first bytes.
    fn speaks(io: &Self::Io) -> impl Future<Output = Option<Speaks>> + Send;
}

/// Plain HTTP: no handshake.
#[derive(Clone, Copy, Debug)]
pub struct Plain;

impl Handshake for Plain {
    type Io = TcpStream;

    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<TcpStream> {
        Ok(tcp)
    }

    async fn speaks(io: &TcpStream) -> Option<Speaks> {
        version::peek(io).await
    }
}

/// TLS on the configuration in force when the connection arrived (a reload applies to the next
/// connections).
#[cfg(feature = "tls")]
impl Handshake for std::sync::Arc<tls::ServerTls> {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;

    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<Self::Io> {
        self.accept(tcp).await
    }

    async fn speaks(io: &Self::Io) -> Option<Speaks> {
        Speaks::of_alpn(io.get_ref().1.alpn_protocol())
    }
}

/// Serves `handler` on `listener` until `stop` resolves, then stops accepting and drains open
/// connections as `drain` says. Each connection's `handshake` runs on its own task; a failed one
/// is logged at debug and costs the loop nothing. A connection whose HTTP version is known
/// ([`Handshake::speaks`]) is served as that version, any other by hyper-util's detection. Accept
/// errors (e.g. too many open files) are logged and the loop goes on.
pub async fn serve_http<S, H, F, B>(
    listener: TcpListener,
    handshake: S,
    handler: H,
    stop: impl Future<Output = ()>,
    drain: Drain,
) where
    S: Handshake,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let http1 = hyper::server::conn::http1::Builder::new();
    let http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // Set at the stop: a connection that has sent nothing yet is closed then, as hyper-util's
    // detection would close it.
    let (closing, _) = watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
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
            // Boxed: hyper keeps one allocation the size of the service's future for the life of
            // the connection, even after the future is done. Unboxed, that is the whole handler's
            // state machine (~9 KiB for the proxy's) held by every open stream; boxed, it is a
            // pointer, and the handler's state is freed once the response head is returned.
            let response = Box::pin(handler(req));
            async move { Ok::<_, Infallible>(response.await) }
        });
        // Taken now, so that a stop waits for a connection still in its handshake.
        let watcher = graceful.watcher();
        let (builder, http1, http2, handshake) =
            (builder.clone(), http1.clone(), http2.clone(), handshake.clone());
        let mut closing = closing.subscribe();
        tokio::spawn(async move {
            let io = match handshake.handshake(stream).await {
                Ok(io) => io,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "handshake failed");
                    return;
                }
            };
            let speaks = tokio::select! {
                speaks = S::speaks(&io) => speaks,
                _ = closing.wait_for(|closing| *closing) => return,
            };
            let io = TokioIo::new(io);
            match speaks {
                Some(Speaks::Http1) => {
                    let _ = watcher.watch(http1.serve_connection(io, service)).await;
                }
                Some(Speaks::Http2) => {
                    let _ = watcher.watch(http2.serve_connection(io, service)).await;
                }
                None => {
                    let conn = builder.serve_connection_with_upgrades(io, service);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
            }
        });
    }
    drop(listener);
    closing.send_replace(true);
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
        let server = tokio::spawn(serve_http(listener, Plain, handler, stop.wait(), Drain::Unbounded));
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

    #[tokio::test]
    async fn both_http_versions_are_served_and_a_silent_connection_does_not_hold_up_the_stop() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (fire, fired) = tokio::sync::oneshot::channel::<()>();
        let handler = |req: Request<Incoming>| async move {
            Response::new(Full::new(Bytes::from(format!("{:?}", req.version()))))
        };
        let stop = async move {
            let _ = fired.await;
        };
        let server = tokio::spawn(serve_http(listener, Plain, handler, stop, Drain::Unbounded));
        let http1 = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let http2 = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Empty<Bytes>>();
        let url: hyper::Uri = format!("http://{addr}/").parse().unwrap();
        for (client, version) in [(&http1, "HTTP/1.1"), (&http2, "HTTP/2.0")] {
            let resp = client.get(url.clone()).await.unwrap();
            assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), version);
        }

        // HTTP/2's preface in two writes: whether the peek saw a part of it (hyper-util then
        // reads the rest) or all of it, the server answers with its SETTINGS frame.
        let mut split = TcpStream::connect(addr).await.unwrap();
        split.set_nodelay(true).unwrap();
        split.write_all(&version::H2_PREFACE[..10]).await.unwrap();
        tokio::task::yield_now().await;
        split.write_all(&version::H2_PREFACE[10..]).await.unwrap();
        // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
        split.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
        let mut head = [0u8; 9];
        split.read_exact(&mut head).await.unwrap();
        assert_eq!(head[3], 4, "the server's first frame is SETTINGS: {head:?}");
        // (It could not answer the PING of HTTP/2's graceful close.)
        drop(split);

        // A connection that never sends a byte is closed at the stop. The listener accepts in
        // order: once a connection made after it is answered, it has been accepted.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let fresh = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        assert!(fresh.get(url).await.unwrap().status().is_success());
        fire.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the stop is not held up by a silent connection")
            .unwrap();
        assert_eq!(silent.read(&mut [0u8; 1]).await.unwrap(), 0, "closed without an answer");
    }
}

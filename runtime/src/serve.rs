//! How every binary serves HTTP and stops: one shutdown signal that every
//! task of a server waits on ([`Stop`]), and one hyper accept loop (HTTP/1 and HTTP/2, no
//! Nagle) that stops accepting on it and lets open connections finish ([`serve_http`]), plain
//! or behind TLS ([`tls`]). The proxy's API, the sim's API and
//! bootstrap ports and control's `/metrics` all run on it.

pub mod grpc;
pub mod limits;
pub mod tls;
mod version;
pub mod worker_client;

pub use limits::{ConnLimits, Gate, GateCounts};
pub use version::Speaks;

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
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
/// (`Arc<tls::ServerTls>`).
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
impl Handshake for std::sync::Arc<tls::ServerTls> {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;

    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<Self::Io> {
        self.accept(tcp).await
    }

    async fn speaks(io: &Self::Io) -> Option<Speaks> {
        Speaks::of_alpn(io.get_ref().1.alpn_protocol())
    }
}

/// A listener's limits and its open-connection cap (whose counters the caller may export).
#[derive(Clone, Debug)]
pub struct Listening {
    /// The limits every connection is held to.
    pub limits: ConnLimits,
    /// The cap on open connections, and its counters.
    pub gate: std::sync::Arc<Gate>,
}

impl Listening {
    /// `limits`, with a gate of `limits.max_connections`.
    pub fn new(limits: ConnLimits) -> Self {
        Self { limits, gate: Gate::new(limits.max_connections) }
    }
}

/// Serves `handler` on `listener` until `stop` resolves, then stops accepting and drains open
/// connections as `drain` says. Each connection's `handshake` runs on its own task; a failed one
/// is logged at debug and costs the loop nothing. A connection whose HTTP version is known
/// ([`Handshake::speaks`]) is served as that version, any other by hyper-util's detection.
/// `listening` bounds what connections cost ([`ConnLimits`]): the handshake and first bytes
/// and each HTTP/1 request head within `header_read`, at most `max_connections` open (one past
/// it is closed at once), HTTP/2 streams and header sizes capped, dead HTTP/2 peers found by
/// pings; a failed accept (e.g. too many open files) is retried after a growing wait.
pub async fn serve_http<S, H, F, B>(
    listener: TcpListener,
    handshake: S,
    handler: H,
    stop: impl Future<Output = ()>,
    drain: Drain,
    listening: Listening,
) where
    S: Handshake,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    let Listening { limits, gate } = listening;
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let mut http1 = hyper::server::conn::http1::Builder::new();
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    limit_http1(&mut http1, &limits);
    limit_http2(&mut http2, &limits);
    limit_http1(&mut builder.http1(), &limits);
    limit_http2(&mut builder.http2(), &limits);
    // Set at the stop: a connection that has sent nothing yet is closed then, as hyper-util's
    // detection would close it.
    let (closing, _) = watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, peer, place) = tokio::select! {
            _ = &mut stop => break,
            accepted = limits::accept(&listener, &gate) => accepted,
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
        let header_read = limits.header_read;
        tokio::spawn(async move {
            let _place = place;
            // The handshake and the first bytes within the header deadline: a connection that
            // never speaks is closed then, not held.
            let opened = async {
                let io = handshake.handshake(stream).await?;
                let speaks = S::speaks(&io).await;
                Ok::<_, std::io::Error>((io, speaks))
            };
            let (io, speaks) = tokio::select! {
                opened = tokio::time::timeout(header_read, opened) => match opened {
                    Ok(Ok(opened)) => opened,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, ?header_read, "closed: nothing sent within the header deadline");
                        return;
                    }
                },
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

/// HTTP/1: a deadline for every request head, and its size.
fn limit_http1<B: Http1Knobs>(b: &mut B, limits: &ConnLimits) {
    b.knobs(limits);
}

/// HTTP/2: streams per connection, header list size, keep-alive pings, and the bounds on reset
/// streams that answer "rapid reset" floods.
fn limit_http2<B: Http2Knobs>(b: &mut B, limits: &ConnLimits) {
    b.knobs(limits);
}

/// The HTTP/1 settings of hyper's builder and of hyper-util's auto builder alike.
trait Http1Knobs {
    fn knobs(&mut self, limits: &ConnLimits);
}

/// The HTTP/2 settings of hyper's builder and of hyper-util's auto builder alike.
trait Http2Knobs {
    fn knobs(&mut self, limits: &ConnLimits);
}

/// Reset streams a client may leave for the server to accept, and the server's own resets, before
/// the connection is closed (hyper's defaults, stated).
const MAX_RESET_STREAMS: usize = 20;
const MAX_LOCAL_RESETS: usize = 1024;

macro_rules! http1_knobs {
    ($t:ty) => {
        impl Http1Knobs for $t {
            fn knobs(&mut self, limits: &ConnLimits) {
                self.timer(TokioTimer::new())
                    .header_read_timeout(limits.header_read)
                    .max_buf_size((limits.max_header_bytes as usize).max(8192));
            }
        }
    };
}

macro_rules! http2_knobs {
    ($t:ty) => {
        impl Http2Knobs for $t {
            fn knobs(&mut self, limits: &ConnLimits) {
                self.timer(TokioTimer::new())
                    .max_concurrent_streams(limits.h2_max_concurrent_streams)
                    .max_header_list_size(limits.max_header_bytes)
                    .keep_alive_interval(limits.h2_keep_alive)
                    .keep_alive_timeout(limits.h2_keep_alive)
                    .max_pending_accept_reset_streams(MAX_RESET_STREAMS)
                    .max_local_error_reset_streams(MAX_LOCAL_RESETS);
            }
        }
    };
}

http1_knobs!(hyper::server::conn::http1::Builder);
http1_knobs!(hyper_util::server::conn::auto::Http1Builder<'_, TokioExecutor>);
http2_knobs!(hyper::server::conn::http2::Builder<TokioExecutor>);
http2_knobs!(hyper_util::server::conn::auto::Http2Builder<'_, TokioExecutor>);

#[cfg(test)]
mod tests;

//! Connections for a tonic server (`serve_with_incoming_shutdown`), held to a listener's limits
//! as [`super::serve_http`] holds its own: at most `max_connections` open (one past it closed
//! at once), a failed accept retried after a growing wait, and a connection that does not
//! finish its TLS handshake and send its first bytes within `header_read` closed before tonic
//! ever sees it. Each connection keeps its place under the cap until it closes ([`Gated`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::server::Connected;

use super::limits::accept;
use super::{Handshake, Listening};

/// A connection and its place under the listener's cap, given back when it is dropped.
#[derive(Debug)]
pub struct Gated<S> {
    io: S,
    _place: OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Gated<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gated<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// What tonic learns of a connection (the peer address; with TLS, the client's certificates)
/// is the inner stream's.
impl<S: Connected> Connected for Gated<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// The connections of `listener` after `handshake`, held to `listening`, as tonic's incoming
/// stream. Polling the stream drives the accept loop; each connection's handshake and first
/// bytes run on their own task under the header deadline, and ready connections come out in the
/// order they are ready.
pub struct Incoming<Io> {
    /// The accept loop. It lives in the stream, not in a task of its own, so that the listener
    /// is closed the moment the server drops the stream: a server that has stopped frees its
    /// port before `serve` returns, and a new one can bind it at once.
    accepting: Pin<Box<dyn Future<Output = ()> + Send>>,
    ready: tokio::sync::mpsc::Receiver<io::Result<Gated<Io>>>,
}

impl<Io> std::fmt::Debug for Incoming<Io> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming").field("ready", &self.ready).finish_non_exhaustive()
    }
}

impl<Io> tokio_stream::Stream for Incoming<Io> {
    type Item = io::Result<Gated<Io>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The loop never ends; polled here it accepts what is waiting and registers for more.
        let _ = self.accepting.as_mut().poll(cx);
        self.ready.poll_recv(cx)
    }
}

/// The connections of `listener` after `handshake`, held to `listening` (see [`Incoming`]).
pub fn incoming<S>(listener: TcpListener, handshake: S, listening: Listening) -> Incoming<S::Io>
where
    S: Handshake,
{
    let (tx, ready) = tokio::sync::mpsc::channel(64);
    let Listening { limits, gate } = listening;
    let accepting = async move {
        loop {
            let (tcp, peer, place) = accept(&listener, &gate).await;
            // Small unary calls: never wait for Nagle.
            let _ = tcp.set_nodelay(true);
            let (tx, handshake) = (tx.clone(), handshake.clone());
            tokio::spawn(async move {
                let ready = async {
                    let io = handshake.handshake(tcp).await?;
                    // The client's first bytes (a TLS stream has spoken by finishing its handshake).
                    let _ = S::speaks(&io).await;
                    Ok::<_, io::Error>(io)
                };
                match tokio::time::timeout(limits.header_read, ready).await {
                    Ok(Ok(io)) => {
                        let _ = tx.send(Ok(Gated { io, _place: place })).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "handshake failed"),
                    Err(_) => {
                        tracing::debug!(%peer, header_read = ?limits.header_read, "closed: nothing sent within the header deadline")
                    }
                }
            });
        }
    };
    Incoming { accepting: Box::pin(accepting), ready }
}

/// The plain connections of `listener`, as [`incoming`] gives them.
pub fn plain(listener: TcpListener, listening: Listening) -> Incoming<TcpStream> {
    incoming(listener, super::Plain, listening)
}

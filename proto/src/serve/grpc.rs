//! Connections for a tonic server (`serve_with_incoming_shutdown`), held to a listener's limits
//! as [`super::serve_http`] holds its own: at most `max_connections` open (one past it closed
//! at once), a failed accept retried after a growing wait, and a connection that does not
//! finish its TLS handshake and send its first bytes within `header_read` closed before tonic
//! ever sees it. Each connection keeps its place under the cap until it closes ([`Gated`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio_stream::wrappers::ReceiverStream;
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

/// The connections of `listener` after `handshake`, held to `listening`: one task accepts, each
/// connection's handshake and first bytes run on their own task under the header deadline, and
/// ready connections come out in the order they are ready. The listener closes when the stream
/// is dropped.
pub fn incoming<S>(
    listener: TcpListener,
    handshake: S,
    listening: Listening,
) -> ReceiverStream<io::Result<Gated<S::Io>>>
where
    S: Handshake,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let Listening { limits, gate } = listening;
    tokio::spawn(async move {
        loop {
            let (tcp, peer, place) = tokio::select! {
                _ = tx.closed() => return,
                accepted = accept(&listener, &gate) => accepted,
            };
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
    });
    ReceiverStream::new(rx)
}

/// The plain connections of `listener`, as [`incoming`] gives them.
pub fn plain(listener: TcpListener, listening: Listening) -> ReceiverStream<io::Result<Gated<TcpStream>>> {
    incoming(listener, super::Plain, listening)
}

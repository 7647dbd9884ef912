//! A bound on the ZMQ frames a worker may send control. The ZMQ library reserves a frame's whole
//! announced length before reading it, so one frame header claiming 2⁴⁰ bytes from a worker's
//! KV-event or load socket (or anyone who can answer on its address) would take control's
//! memory. Each subscriber therefore connects through a relay on loopback ([`guard`]) that reads
//! the publisher's side of ZMTP 3 (a 64-byte greeting, then frames: a flags byte, a 1- or 8-byte
//! length, the body) and passes bytes on only while every frame is at most [`MAX_FRAME_BYTES`];
//! a larger one closes the connection, and the subscriber reconnects as after any break.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The largest frame a publisher may send (64 MiB: far above any KV-event batch or `LoadStat`).
pub const MAX_FRAME_BYTES: u64 = 64 << 20;

/// ZMTP 3's greeting, in bytes.
const GREETING: u64 = 64;

/// Where the checker is in the publisher's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside the greeting, this many bytes left.
    Greeting(u64),
    /// Waiting for a frame's flags byte.
    Flags,
    /// Reading a frame's length: its width (1 or 8), the bytes read so far, the value so far.
    Length { width: u8, read: u8, value: u64 },
    /// Inside a frame's body, this many bytes left.
    Body(u64),
}

/// Reads a publisher's bytes as ZMTP frames and refuses a frame longer than the limit.
#[derive(Debug, Clone)]
pub struct FrameChecker {
    state: State,
    max: u64,
}

/// A frame over the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a ZMQ frame of {length} bytes, more than the limit of {max}")]
pub struct FrameTooLarge {
    /// The frame's announced length.
    pub length: u64,
    /// The limit.
    pub max: u64,
}

impl FrameChecker {
    /// A checker at the start of a connection, refusing frames over `max` bytes.
    pub fn new(max: u64) -> Self {
        Self { state: State::Greeting(GREETING), max }
    }

    /// Takes the next bytes of the stream; an error once a frame header announces more than the
    /// limit (before any of its body is passed on).
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), FrameTooLarge> {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.state {
                State::Greeting(left) | State::Body(left) => {
                    let take = left.min(bytes.len() as u64);
                    bytes = &bytes[take as usize..];
                    self.state = match (self.state, left - take) {
                        (_, 0) => State::Flags,
                        (State::Greeting(_), n) => State::Greeting(n),
                        (_, n) => State::Body(n),
                    };
                    continue;
                }
                State::Flags => {
                    let long = b & 0b10 != 0;
                    self.state = State::Length { width: if long { 8 } else { 1 }, read: 0, value: 0 };
                }
                State::Length { width, read, value } => {
                    let value = (value << 8) | u64::from(b);
                    if read + 1 < width {
                        self.state = State::Length { width, read: read + 1, value };
                    } else if value > self.max {
                        return Err(FrameTooLarge { length: value, max: self.max });
                    } else {
                        self.state = if value == 0 { State::Flags } else { State::Body(value) };
                    }
                }
            }
            bytes = rest;
        }
        Ok(())
    }
}

/// A relay in front of one ZMQ endpoint; it stops when dropped.
#[derive(Debug)]
pub struct FrameGuard {
    local: String,
    task: JoinHandle<()>,
}

impl FrameGuard {
    /// The endpoint to connect the ZMQ socket to instead (`tcp://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> &str {
        &self.local
    }
}

impl Drop for FrameGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A relay on loopback in front of the publisher at `endpoint` (`tcp://host:port`), for the ZMQ
/// socket to connect to instead: each connection made to it is passed on to the publisher, the
/// publisher's bytes only while its frames are at most `max` bytes. The publisher is connected
/// once first, so a publisher that is down fails here as a direct connect would (that first
/// connection serves the first one made to the relay); later connections — the ZMQ socket's own
/// reconnects, with its backoff — each connect anew. Any other kind of endpoint gives `None`:
/// connect to it directly.
///
/// # Errors
/// When the publisher cannot be reached within `timeout`, or no loopback port can be bound.
pub async fn guard(endpoint: &str, max: u64, timeout: std::time::Duration) -> io::Result<Option<FrameGuard>> {
    let Some(remote) = endpoint.strip_prefix("tcp://").map(str::to_owned) else { return Ok(None) };
    let connect = move |remote: String| async move {
        match tokio::time::timeout(timeout, TcpStream::connect(&remote)).await {
            Ok(connected) => connected,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{remote}: no answer within {timeout:?}"),
            )),
        }
    };
    let first = connect(remote.clone()).await?;
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let local = format!("tcp://{}", listener.local_addr()?);
    let task = tokio::spawn(async move {
        let mut first = Some(first);
        while let Ok((inbound, _)) = listener.accept().await {
            let (remote, ready) = (remote.clone(), first.take());
            tokio::spawn(async move {
                let outbound = match ready {
                    Some(outbound) => outbound,
                    None => match connect(remote.clone()).await {
                        Ok(outbound) => outbound,
                        Err(_) => return,
                    },
                };
                relay(inbound, outbound, max, &remote).await;
            });
        }
    });
    Ok(Some(FrameGuard { local, task }))
}

/// Copies both ways until either side closes; the publisher's side through a [`FrameChecker`].
async fn relay(inbound: TcpStream, outbound: TcpStream, max: u64, remote: &str) {
    let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
    let (mut from_sub, mut to_sub) = inbound.into_split();
    let (mut from_pub, mut to_pub) = outbound.into_split();
    let upstream = async {
        let _ = tokio::io::copy(&mut from_sub, &mut to_pub).await;
    };
    let downstream = async {
        let mut checker = FrameChecker::new(max);
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match from_pub.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if let Err(e) = checker.feed(&buf[..n]) {
                tracing::warn!(endpoint = remote, error = %e, "ZMQ publisher sent an oversized frame; connection closed");
                return;
            }
            if to_sub.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame: flags (long when needed), length, body.
    fn frame(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if body.len() > 255 {
            out.push(0b10);
            out.extend_from_slice(&(body.len() as u64).to_be_bytes());
        } else {
            out.push(0);
            out.push(body.len() as u8);
        }
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn frames_up_to_the_limit_pass_in_any_split_and_a_larger_header_is_refused() {
        let mut stream = vec![0xffu8; 64];
        stream.extend(frame(b"topic"));
        stream.extend(frame(&[7u8; 300]));
        stream.extend(frame(b""));
        for split in [1, 3, 64, 65, 300, stream.len()] {
            let mut c = FrameChecker::new(300);
            for chunk in stream.chunks(split) {
                c.feed(chunk).unwrap();
            }
            assert_eq!(c.state, State::Flags, "split {split}: ends between frames");
        }
        let mut c = FrameChecker::new(300);
        let mut bomb = vec![0xffu8; 64];
        bomb.push(0b10);
        bomb.extend_from_slice(&(1u64 << 40).to_be_bytes());
        assert_eq!(c.feed(&bomb), Err(FrameTooLarge { length: 1 << 40, max: 300 }));
    }

    #[tokio::test]
    async fn the_relay_passes_a_publishers_frames_and_cuts_one_that_announces_too_much() {
        let publisher = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("tcp://{}", publisher.local_addr().unwrap());
        let timeout = std::time::Duration::from_secs(5);
        let (guard, accepted) = tokio::join!(guard(&endpoint, 1 << 10, timeout), publisher.accept());
        let (guard, (mut sent, _)) = (guard.unwrap().unwrap(), accepted.unwrap());
        let local = guard.endpoint().strip_prefix("tcp://").unwrap().to_owned();
        let mut subscriber = TcpStream::connect(&local).await.unwrap();
        let mut good = vec![0xffu8; 64];
        good.extend(frame(b"hello"));
        sent.write_all(&good).await.unwrap();
        let mut got = vec![0u8; good.len()];
        subscriber.read_exact(&mut got).await.unwrap();
        assert_eq!(got, good, "frames within the limit pass unchanged");
        let mut bomb = vec![0b10];
        bomb.extend_from_slice(&(1u64 << 40).to_be_bytes());
        sent.write_all(&bomb).await.unwrap();
        let mut rest = Vec::new();
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), subscriber.read_to_end(&mut rest))
            .await
            .expect("the relay closes the connection")
            .unwrap_or(0);
        assert_eq!(n, 0, "no byte of the oversized frame reached the subscriber");
        // A publisher that is down fails the guard as it would fail a connect.
        drop(publisher);
        assert!(super::guard(&endpoint, 1 << 10, timeout).await.is_err());
    }
}

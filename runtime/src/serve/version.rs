//! Which HTTP a new connection speaks, told before hyper reads from it: TLS says it by ALPN, and
//! on plain TCP a peek at the first bytes shows whether they begin HTTP/2's preface.
//!
//! Serving the known version directly skips hyper-util's auto-detection. That reads the first
//! bytes itself and hands them back through a rewind buffer, and those few bytes make hyper's
//! HTTP/1 read buffer grow from 8 to 16 KiB on its next read (`BytesMut::reserve` doubles a
//! buffer that is not empty). A server keeps that buffer as long as the connection is open: for
//! the proxy, for every open stream.

use tokio::net::TcpStream;

/// HTTP/2's connection preface (RFC 9113, section 3.4).
pub(super) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The HTTP a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speaks {
    /// HTTP/1.x.
    Http1,
    /// HTTP/2.
    Http2,
}

impl Speaks {
    /// From the first bytes a client sent; `None` when they are too few to tell (none yet, or
    /// a part of the preface).
    pub fn of_first_bytes(first: &[u8]) -> Option<Self> {
        let n = first.len().min(H2_PREFACE.len());
        if first[..n] != H2_PREFACE[..n] {
            Some(Self::Http1)
        } else if n == H2_PREFACE.len() {
            Some(Self::Http2)
        } else {
            None
        }
    }

    /// From the protocol TLS negotiated; `None` when none was.
    pub fn of_alpn(alpn: Option<&[u8]>) -> Option<Self> {
        match alpn? {
            b"h2" => Some(Self::Http2),
            b"http/1.1" => Some(Self::Http1),
            _ => None,
        }
    }
}

/// Waits for a plain connection's first bytes and tells its HTTP by them, without taking them
/// from the socket. `None`: too few arrived to tell, or the peek failed; hyper reads the
/// preface itself then.
pub(super) async fn peek(tcp: &TcpStream) -> Option<Speaks> {
    let mut first = [0u8; H2_PREFACE.len()];
    let n = tcp.peek(&mut first).await.ok()?;
    Speaks::of_first_bytes(&first[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_http2_only_by_the_whole_preface() {
        assert_eq!(Speaks::of_first_bytes(H2_PREFACE), Some(Speaks::Http2));
        let mut more = H2_PREFACE.to_vec();
        more.extend_from_slice(b"\0\0\x12\x04");
        assert_eq!(Speaks::of_first_bytes(&more), Some(Speaks::Http2));
        assert_eq!(Speaks::of_first_bytes(b"POST /v1/chat/completions HTTP/1.1\r\n"), Some(Speaks::Http1));
        assert_eq!(Speaks::of_first_bytes(b"PRI * HTTP/1.1\r\n"), Some(Speaks::Http1));
        assert_eq!(Speaks::of_first_bytes(b"P"), None, "a part of the preface cannot tell");
        assert_eq!(Speaks::of_first_bytes(&H2_PREFACE[..23]), None);
        assert_eq!(Speaks::of_first_bytes(b""), None);
    }

    #[test]
    fn alpn_tells_by_its_protocol_name() {
        assert_eq!(Speaks::of_alpn(Some(b"h2")), Some(Speaks::Http2));
        assert_eq!(Speaks::of_alpn(Some(b"http/1.1")), Some(Speaks::Http1));
        assert_eq!(Speaks::of_alpn(Some(b"spdy/3")), None);
        assert_eq!(Speaks::of_alpn(None), None);
    }
}

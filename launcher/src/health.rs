//! Worker readiness: `GET /health` answered 200, polled until a deadline. One plain HTTP/1.1
//! request per attempt (no client library: the launcher only needs a status line).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// Time between attempts.
pub const POLL_EVERY: Duration = Duration::from_millis(100);
/// Bound on one attempt (connect, send, status line).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a health check did not pass.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The URL is not `http://host:port/path`.
    #[error("cannot check {url}: only http://host:port/path URLs")]
    BadUrl {
        /// The URL given.
        url: String,
    },
    /// Not healthy when the deadline passed.
    #[error("not healthy after {waited:?} (last: {last})")]
    Deadline {
        /// How long it was polled.
        waited: Duration,
        /// The last attempt's outcome.
        last: String,
    },
}

/// Polls `url` until it answers 200 or `deadline` passes.
pub async fn wait_healthy(url: &str, deadline: Instant) -> Result<(), HealthError> {
    let (addr, path) = split(url).ok_or_else(|| HealthError::BadUrl { url: url.to_owned() })?;
    let start = Instant::now();
    loop {
        let last = match timeout(ATTEMPT_TIMEOUT, status(&addr, &path)).await {
            Ok(Ok(200)) => return Ok(()),
            Ok(Ok(code)) => format!("HTTP {code}"),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {ATTEMPT_TIMEOUT:?}"),
        };
        let next = Instant::now() + POLL_EVERY;
        if next >= deadline {
            return Err(HealthError::Deadline { waited: start.elapsed(), last });
        }
        tokio::time::sleep_until(next).await;
    }
}

/// One `GET path` to `addr`: the response's status code.
async fn status(addr: &str, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut head = Vec::with_capacity(64);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {:?}", line.lines().next())))
}

/// `http://host:port/path` → (`host:port`, `/path`).
fn split(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let has_port = authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && (!authority.starts_with('[') || authority.contains("]:"));
    let authority = if has_port { authority.to_owned() } else { format!("{authority}:80") };
    Some((authority, path.to_owned()))
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn urls_split_into_address_and_path() {
        assert_eq!(
            split("http://127.0.0.1:30000/health"),
            Some(("127.0.0.1:30000".into(), "/health".into()))
        );
        assert_eq!(split("http://node/health"), Some(("node:80".into(), "/health".into())));
        assert_eq!(split("http://[::1]:8/h"), Some(("[::1]:8".into(), "/h".into())));
        assert_eq!(split("https://node/health"), None);
    }

    async fn serve(status: &'static str) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/health", l.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ =
                    s.write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n").as_bytes()).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn a_200_is_healthy() {
        let url = serve("200 OK").await;
        wait_healthy(&url, Instant::now() + Duration::from_secs(10)).await.unwrap();
    }

    #[tokio::test]
    async fn a_503_until_the_deadline_is_reported() {
        let url = serve("503 Service Unavailable").await;
        let e = wait_healthy(&url, Instant::now() + Duration::from_millis(300)).await.unwrap_err();
        assert!(e.to_string().contains("HTTP 503"), "{e}");
    }

    #[tokio::test]
    async fn nothing_listening_is_reported() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/health", l.local_addr().unwrap());
        drop(l);
        let e = wait_healthy(&url, Instant::now() + Duration::from_millis(200)).await.unwrap_err();
        assert!(matches!(e, HealthError::Deadline { .. }), "{e}");
    }
}

//! The decode side of the PD rendezvous: a long poll on the prefill's bootstrap listener,
//! `GET http://{bootstrap_host}:{bootstrap_port}/sim/kv/{room}?timeout_ms=T[&dp_rank=R]`, retried
//! on connection errors until the bootstrap timeout.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;

use crate::rooms::KvInfo;

/// Pause between attempts when the prefill cannot be reached.
const RETRY: Duration = Duration::from_millis(100);

/// Why the KV did not arrive.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// Nothing within the bootstrap timeout.
    #[error("KV transfer for bootstrap_room {room} from {addr} timed out after {ms} ms{}",
            last.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
    Timeout {
        /// The bootstrap room of the request.
        room: u64,
        /// The prefill's bootstrap address.
        addr: String,
        /// How long the decode waited, ms.
        ms: u128,
        /// The last connection error, if any.
        last: Option<String>,
    },
    /// The prefill answered with an error (it failed, or the rank does not match).
    #[error("KV transfer for bootstrap_room {room} failed on the prefill ({status}): {message}")]
    Prefill {
        /// The bootstrap room of the request.
        room: u64,
        /// The prefill's status.
        status: StatusCode,
        /// Its message.
        message: String,
    },
}

/// An HTTP client for bootstrap long polls.
#[derive(Debug, Clone)]
pub struct KvClient(Client<HttpConnector, Empty<Bytes>>);

impl Default for KvClient {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self(Client::builder(TokioExecutor::new()).build(connector))
    }
}

impl KvClient {
    /// Waits up to `timeout` for `room`'s KV from the prefill at `host:port`.
    pub async fn pull(
        &self,
        (host, port): (&str, u16),
        room: u64,
        expect_rank: Option<u32>,
        timeout: Duration,
    ) -> Result<KvInfo, PullError> {
        let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PullError::Timeout { room, addr, ms: timeout.as_millis(), last });
            }
            let rank = expect_rank.map(|r| format!("&dp_rank={r}")).unwrap_or_default();
            let uri = format!("http://{addr}/sim/kv/{room}?timeout_ms={}{rank}", left.as_millis());
            let attempt = tokio::time::timeout(left + RETRY, self.get(&uri)).await;
            match attempt {
                Ok(Ok((StatusCode::OK, body))) => match serde_json::from_slice::<KvInfo>(&body) {
                    Ok(info) => return Ok(info),
                    Err(e) => last = Some(format!("bad answer: {e}")),
                },
                Ok(Ok((StatusCode::GATEWAY_TIMEOUT, _))) | Err(_) => {
                    return Err(PullError::Timeout { room, addr, ms: timeout.as_millis(), last });
                }
                Ok(Ok((status, body))) => {
                    let message = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v.get("error").and_then(|e| e.as_str().map(str::to_owned)))
                        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
                    return Err(PullError::Prefill { room, status, message });
                }
                Ok(Err(e)) => last = Some(e),
            }
            let pause = RETRY.min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(pause).await;
        }
    }

    async fn get(&self, uri: &str) -> Result<(StatusCode, Bytes), String> {
        let uri: hyper::Uri = uri.parse().map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
        let response = self.0.get(uri).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, body))
    }
}

//! Asking a publisher's replay ROUTER for batches from `start` on, through a fresh DEALER per
//! request (so a late reply to an abandoned request can never be taken for a new one's).

use std::time::Duration;

use bytes::Bytes;
use zeromq::{DealerSocket, Socket as _, SocketOptions, SocketRecv as _, SocketSend as _, ZmqMessage};

use super::ReplayFailure;
use super::frames::{self, Reply};

/// Most batches one replay may return (SGLang buffers 10,000 by default).
const MAX_REPLAYED: usize = 1 << 20;

/// Every buffered batch with `seq >= start`, `(seq, payload)`, as the publisher sent them; the
/// whole exchange (connect included) must finish within `timeout`.
pub(super) async fn fetch(
    endpoint: &str,
    start: u64,
    timeout: Duration,
) -> Result<Vec<(u64, Bytes)>, ReplayFailure> {
    let exchange = async {
        let mut options = SocketOptions::default();
        options.connect_timeout(timeout);
        let mut dealer = DealerSocket::with_options(options);
        let guard = crate::frame_guard::guard(endpoint, crate::frame_guard::MAX_FRAME_BYTES, timeout)
            .await
            .map_err(|e| ReplayFailure::Connect(e.to_string()))?;
        let target = guard.as_ref().map_or(endpoint, crate::frame_guard::FrameGuard::endpoint);
        dealer.connect(target).await.map_err(|e| ReplayFailure::Connect(e.to_string()))?;
        let request = vec![Bytes::new(), Bytes::copy_from_slice(&start.to_be_bytes())];
        let request = ZmqMessage::try_from(request).map_err(|e| ReplayFailure::Connect(e.to_string()))?;
        dealer.send(request).await.map_err(|e| ReplayFailure::Connect(e.to_string()))?;
        let mut out = Vec::new();
        loop {
            let reply = dealer.recv().await.map_err(|e| ReplayFailure::Connect(e.to_string()))?;
            match frames::reply(&reply.into_vec()) {
                Ok(Reply::End) => return Ok(out),
                Ok(Reply::Batch(seq, payload)) if out.len() < MAX_REPLAYED => out.push((seq, payload)),
                Ok(Reply::Batch(..)) => return Err(ReplayFailure::TooLong(MAX_REPLAYED)),
                Err(e) => return Err(ReplayFailure::Malformed(e)),
            }
        }
    };
    tokio::time::timeout(timeout, exchange).await.unwrap_or(Err(ReplayFailure::Timeout(timeout)))
}

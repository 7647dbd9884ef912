//! The peak-rate round: short non-streamed requests in a closed loop from many clients, each
//! sending its next request as soon as the last is answered; requests/s over the round.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;

use super::{HttpClient, request};

/// Requests answered per second by `url` with `clients` closed-loop clients for `length`,
/// each asking for `max_tokens` tokens, not streamed.
pub(super) async fn rate(
    client: &HttpClient,
    url: &str,
    clients: usize,
    length: Duration,
    max_tokens: u32,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let end = start + length;
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (client, url) = (client.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut answered = 0u64;
            while Instant::now() < end {
                let resp = client.request(request(&url, max_tokens, false)).await?;
                anyhow::ensure!(resp.status().is_success(), "status {}", resp.status());
                resp.into_body().collect().await?;
                answered += 1;
            }
            Ok(answered)
        }));
    }
    let mut answered = 0;
    for t in tasks {
        answered += t.await??;
    }
    Ok(answered as f64 / start.elapsed().as_secs_f64())
}

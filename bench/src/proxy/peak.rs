//! The peak-rate round: short non-streamed requests in a closed loop from many clients, each
//! sending its next request as soon as the last is answered; requests/s over the round. The
//! sim's request log says how much of each request's time was spent in the engine itself, so a
//! side's hop (the time outside the engine) and its effect on the engine (batching, balance) are
//! told apart.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use infera_testkit::http::get_json;

use super::scrape::PickScrape;
use super::{HttpClient, request};

/// What one peak measurement saw.
#[derive(Clone, Copy, Debug)]
pub(super) struct Peak {
    /// Requests answered per second.
    pub(super) rate: f64,
    /// Requests answered.
    pub(super) answered: u64,
}

/// Requests answered by `url` with `clients` closed-loop clients for `length`, each asking for
/// `max_tokens` tokens, not streamed.
pub(super) async fn rate(
    client: &HttpClient,
    url: &str,
    clients: usize,
    length: Duration,
    max_tokens: u32,
) -> anyhow::Result<Peak> {
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
    Ok(Peak { rate: answered as f64 / start.elapsed().as_secs_f64(), answered })
}

/// The mean time in the engine, in ms, of the newest `last` requests in the sim's log (it keeps
/// 10,000) that were answered; `None` when there are none.
pub(super) async fn engine_ms(sim: &str, last: u64) -> anyhow::Result<Option<f64>> {
    let log = get_json(&format!("http://{sim}/sim/requests")).await?;
    let entries = log.as_array().map_or(&[][..], Vec::as_slice);
    let from = entries.len().saturating_sub(usize::try_from(last).unwrap_or(usize::MAX));
    let times: Vec<f64> = entries[from..]
        .iter()
        .filter(|e| e["outcome"] == "ok")
        .filter_map(|e| e["engine_ms"].as_f64())
        .collect();
    Ok((!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64))
}

/// Runs the peak-rate round over `sides` (name, URL; direct first), two measurements per side
/// alternating, and prints each side's best rate, its time a request and the engine's share.
pub(super) async fn report(
    client: &HttpClient,
    sides: &[(&str, String)],
    sim: &str,
    clients: usize,
    length: Duration,
    pick_scrape: &PickScrape<'_>,
) -> anyhow::Result<()> {
    let mut rates = vec![Vec::new(); sides.len()];
    let mut engine = vec![Vec::new(); sides.len()];
    // The proxy's decode picks during its peak rounds: the control round trip in each request.
    let mut picks = Vec::new();
    for _ in 0..2 {
        for (((side, url), r), e) in sides.iter().zip(&mut rates).zip(&mut engine) {
            let peak = rate(client, url, clients, length, 4);
            let (seen, means) = pick_scrape.during(*side == "proxy", peak).await?;
            r.push(seen.rate);
            e.extend(engine_ms(sim, seen.answered).await?);
            picks.extend(means.map(|m| m.to_string()));
        }
    }
    let best: Vec<f64> = rates.iter().map(|r| r.iter().copied().fold(0.0, f64::max)).collect();
    println!(
        "peak rate, {clients} closed-loop clients, 4-token answers not streamed, best of 2 × {}s:",
        length.as_secs()
    );
    for (((side, _), (r, b)), e) in sides.iter().zip(rates.iter().zip(&best)).zip(&engine) {
        // Closed loop: each client's request takes clients / rate on average.
        let latency = clients as f64 / b * 1e3;
        let inside = e.iter().map(|ms| format!("{ms:.2}")).collect::<Vec<_>>().join(", ");
        println!(
            "  {side:>7} {b:>9.0} req/s ({:.0}, {:.0}), {:.3} of direct, {latency:.2} ms a request \
             (in the engine: {inside} ms)",
            r[0],
            r[1],
            b / best[0]
        );
    }
    println!("  the proxy's decode pick (its round trip to control), mean per round: {}", picks.join(", "));
    Ok(())
}

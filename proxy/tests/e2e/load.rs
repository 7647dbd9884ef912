//! A bounded load test on loopback: 1,000 requests over 2 proxies with random cancellations.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use rand::{Rng, SeedableRng, rngs::SmallRng};

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_requests_with_random_cancellations_leave_a_zero_ledger() {
    let cluster = Cluster::start(Shape { decode_dp: 8, ..Shape::default() }).await;
    let proxies = cluster.proxies.clone();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(48));
    let mut rng = SmallRng::seed_from_u64(2026);
    let mut tasks = Vec::new();
    for i in 0..1_000 {
        let url = format!("{}/v1/chat/completions", proxies[i % 2]);
        let stream = rng.random_bool(0.7);
        let cancel_after = if stream && rng.random_bool(0.2) { Some(rng.random_range(1..4)) } else { None };
        let tokens = rng.random_range(2..24);
        let permit = sem.clone().acquire_owned().await.unwrap();
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let resp = send(&url, Bytes::from(chat(tokens, stream).to_string()), &[]).await;
            if resp.status() != StatusCode::OK {
                return Err(format!("status {}", resp.status()));
            }
            let mut body = resp.into_body();
            let mut frames = 0;
            let mut text = Vec::new();
            while let Some(f) = body.frame().await {
                let f = f.map_err(|e| e.to_string())?;
                if let Some(d) = f.data_ref() {
                    text.extend_from_slice(d);
                }
                frames += 1;
                if cancel_after == Some(frames) {
                    return Ok(true); // cancelled: drop the body mid-stream
                }
            }
            let text = String::from_utf8_lossy(&text);
            if text.contains("\"error\"") {
                return Err(format!("error in answer: {text}"));
            }
            Ok(false)
        }));
    }
    let (mut ok, mut cancelled) = (0, 0);
    for t in tasks {
        match tokio::time::timeout(Duration::from_secs(120), t).await.expect("bounded").unwrap() {
            Ok(true) => cancelled += 1,
            Ok(false) => ok += 1,
            Err(e) => panic!("a request failed that was not injected: {e}"),
        }
    }
    assert_eq!(ok + cancelled, 1_000);
    assert!(cancelled > 50, "{cancelled} cancellations");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

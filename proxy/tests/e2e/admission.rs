//! Admission and backpressure: a proxy's in-flight limit with its bounded queue, and control's
//! per-rank cap, both answered with 503 `overloaded` and `Retry-After` once the request has
//! waited as long as it may — and nothing lost.

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

use crate::harness::*;

/// A long stream through `url`, read to its first chunk.
pub(crate) async fn open_stream(url: &str) -> hyper::body::Incoming {
    let resp = send(url, Bytes::from(chat(50_000, true).to_string()), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    http_body_util::BodyExt::frame(&mut body).await.unwrap().unwrap();
    body
}

async fn overloaded(url: &str) -> (String, Option<String>) {
    let resp = send(url, Bytes::from(chat(4, false).to_string()), &[]).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let body = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "overloaded", "{v}");
    (v["error"]["message"].as_str().unwrap().to_owned(), retry_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn above_max_inflight_requests_queue_then_get_503_with_retry_after() {
    let shape = Shape {
        proxies: 1,
        proxy_flags: vec!["--max-inflight", "1", "--queue-depth", "1", "--queue-timeout-ms", "300"],
        ..Shape::default()
    };
    let cluster = Cluster::start(shape).await;
    let url = format!("{}/v1/chat/completions", cluster.proxies[0]);
    let held = open_stream(&url).await;
    // The one place is taken: the next waits its 300 ms in the queue, then is refused.
    let (message, retry_after) = overloaded(&url).await;
    assert!(message.contains("queue timeout"), "{message}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    // One waits in the queue while another finds the queue full at once.
    let waiting = tokio::spawn({
        let url = url.clone();
        async move { post_json(&url, &chat(4, false), &[]).await.0 }
    });
    eventually(std::time::Duration::from_secs(5), "one request queued", async || {
        let (_, m) = get(&format!("{}/metrics", cluster.proxies[0])).await;
        m.lines().any(|l| l == "infera_proxy_queue_depth 1").then_some(())
    })
    .await;
    let (message, _) = overloaded(&url).await;
    assert!(message.contains("queue is full"), "{message}");
    // The place is freed: the queued request goes through.
    drop(held);
    assert_eq!(waiting.await.unwrap(), StatusCode::OK);
    let (_, metrics) = get(&format!("{}/metrics", cluster.proxies[0])).await;
    assert!(metrics.contains("infera_proxy_rejected_total{reason=\"queue_timeout\"} 1"), "{metrics}");
    assert!(metrics.contains("infera_proxy_rejected_total{reason=\"queue_full\"} 1"), "{metrics}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rank_at_its_cap_in_control_is_waited_on_then_refused() {
    let shape = Shape {
        decode_dp: 2,
        proxies: 1,
        control_flags: vec!["--decode-input-demand", "on", "--max-requests-per-rank", "1"],
        proxy_flags: vec!["--queue-timeout-ms", "400"],
        ..Shape::default()
    };
    let cluster = Cluster::start(shape).await;
    let url = format!("{}/v1/chat/completions", cluster.proxies[0]);
    // One stream per decode rank: both are at the cap.
    let first = open_stream(&url).await;
    let second = open_stream(&url).await;
    let (message, retry_after) = overloaded(&url).await;
    assert!(message.contains("every rank is at its cap"), "{message}");
    assert!(retry_after.is_some());
    // A rank frees up while the next request waits: it goes through.
    let waiting = tokio::spawn({
        let url = url.clone();
        async move { post_json(&url, &chat(4, false), &[]).await.0 }
    });
    drop(first);
    assert_eq!(waiting.await.unwrap(), StatusCode::OK);
    drop(second);
    let (_, metrics) = get(&format!("{}/metrics", cluster.proxies[0])).await;
    assert!(metrics.contains("infera_proxy_rejected_total{reason=\"at_capacity\"} 1"), "{metrics}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

//! Service classes through the proxies (`x-infera-service-class`) and control's one admission
//! queue (`--admission on`): requests that find every decode rank full wait in control, across
//! proxies, and the higher class is admitted first; a class control does not define is a 400.

use std::time::Duration;

use http::StatusCode;
use serde_json::Value;

use crate::admission::open_stream;
use crate::harness::*;

fn waiting(metrics: &str, class: &str) -> bool {
    let series = format!("infera_router_admission_waiting{{model=\"{MODEL}\",class=\"{class}\"}} 1");
    metrics.lines().any(|l| l == series)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_interactive_request_is_admitted_before_an_earlier_batch_one_across_proxies() {
    let shape = Shape {
        decode_dp: 2,
        proxies: 2,
        control_flags: vec![
            "--decode-input-demand",
            "on",
            "--admission",
            "on",
            "--max-requests-per-rank",
            "1",
        ],
        proxy_flags: vec!["--queue-timeout-ms", "20000"],
        ..Shape::default()
    };
    let cluster = Cluster::start(shape).await;
    let url = |i: usize| format!("{}/v1/chat/completions", cluster.proxies[i]);
    // Both decode ranks hold a stream.
    let first = open_stream(&url(0)).await;
    let second = open_stream(&url(1)).await;
    // A batch request through one proxy, then an interactive one through the other: both wait in
    // control's queue.
    let batch = tokio::spawn({
        let url = url(0);
        async move { post_json(&url, &chat(4, false), &[("x-infera-service-class", "batch")]).await.0 }
    });
    eventually(Duration::from_secs(10), "the batch request to wait", async || {
        waiting(&cluster.control_metrics().await, "batch").then_some(())
    })
    .await;
    let interactive = tokio::spawn({
        let url = url(1);
        async move { post_json(&url, &chat(4, false), &[("x-infera-service-class", "interactive")]).await.0 }
    });
    eventually(Duration::from_secs(10), "the interactive request to wait", async || {
        waiting(&cluster.control_metrics().await, "interactive").then_some(())
    })
    .await;
    // One rank frees: the interactive request goes, the batch one still waits.
    drop(first);
    assert_eq!(interactive.await.unwrap(), StatusCode::OK);
    assert!(!batch.is_finished(), "the batch request waits for the next free rank");
    drop(second);
    assert_eq!(batch.await.unwrap(), StatusCode::OK);

    // A class control does not define, and a header that cannot name one: 400s.
    for (class, code) in [("gold", "unknown_service_class"), ("a b", "invalid_request")] {
        let (status, body) = post_json(&url(0), &chat(4, false), &[("x-infera-service-class", class)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], code, "{v}");
    }
    let (_, metrics) = get(&format!("{}/metrics", cluster.proxies[0])).await;
    assert!(
        metrics.contains("infera_proxy_class_requests_total{class=\"batch\",code=\"200\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("infera_proxy_class_requests_total{class=\"-\",code=\"400\"} 2"), "{metrics}");
    let control = cluster.control_metrics().await;
    let waited =
        format!("infera_router_admissions_total{{model=\"{MODEL}\",class=\"batch\",outcome=\"waited\"}} 1");
    assert!(control.lines().any(|l| l == waited), "{control}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_waits_on_at_the_next_control_instead_of_jumping_the_queue() {
    let shape = Shape {
        decode_dp: 1,
        proxies: 1,
        control_flags: vec![
            "--decode-input-demand",
            "on",
            "--admission",
            "on",
            "--max-requests-per-rank",
            "1",
        ],
        proxy_flags: vec!["--queue-timeout-ms", "30000"],
        ..Shape::default()
    };
    let mut cluster = Cluster::start(shape).await;
    let url = format!("{}/v1/chat/completions", cluster.proxies[0]);
    let held = open_stream(&url).await;
    let waiting_request = tokio::spawn({
        let url = url.clone();
        async move { post_json(&url, &chat(4, false), &[("x-infera-service-class", "batch")]).await.0 }
    });
    eventually(Duration::from_secs(10), "the request to wait", async || {
        waiting(&cluster.control_metrics().await, "batch").then_some(())
    })
    .await;
    // A new control instance: the old one turns its waiter away; the proxy re-declares the held
    // stream to the new one and waits there again, rather than routing on its own.
    cluster.restart_control().await;
    eventually(Duration::from_secs(15), "the request to wait at the new control", async || {
        waiting(&cluster.control_metrics().await, "batch").then_some(())
    })
    .await;
    assert!(!waiting_request.is_finished(), "the rank is still full");
    drop(held);
    assert_eq!(waiting_request.await.unwrap(), StatusCode::OK);
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

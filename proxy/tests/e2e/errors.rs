//! Bad requests and unavailable targets get OpenAI error JSON; control down means fallback.

use bytes::Bytes;
use http::StatusCode;
use infera_proto::pb;
use serde_json::{Value, json};

use crate::harness::*;

async fn error(resp: (StatusCode, String)) -> (StatusCode, Value) {
    let v: Value = serde_json::from_str(&resp.1).unwrap_or_else(|e| panic!("{e}: {}", resp.1));
    assert!(v["error"]["message"].is_string(), "{v}");
    (resp.0, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors_and_book_nothing() {
    let cluster = Cluster::start(Shape { proxies: 1, ..Shape::default() }).await;
    let proxy = cluster.proxies[0].clone();
    let chat_url = format!("{proxy}/v1/chat/completions");

    let resp = send(&chat_url, Bytes::from_static(b"{not json"), &[("x-request-id", "bad-1")]).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(resp.headers()["x-request-id"], "bad-1", "the request id is echoed on errors too");

    let (s, v) = error(post_json(&chat_url, &json!({"model": "nope", "messages": []}), &[]).await).await;
    assert_eq!((s, v["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("model_not_found")));

    let (s, _) = error(post_json(&chat_url, &json!({"messages": []}), &[]).await).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    let huge = "x".repeat(33 << 20);
    let (s, v) = error(
        post_json(&chat_url, &json!({"model": MODEL, "messages": [{"role": "user", "content": huge}]}), &[])
            .await,
    )
    .await;
    assert_eq!((s, v["error"]["code"].as_str()), (StatusCode::PAYLOAD_TOO_LARGE, Some("request_too_large")));

    let (s, _) = get(&format!("{proxy}/v2/unknown")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Every decode target drained: 503.
    cluster
        .admin()
        .await
        .drain_target(pb::DrainTargetRequest {
            worker_id: "decode-0".into(),
            dp_rank: None,
            ..Default::default()
        })
        .await
        .unwrap();
    let (s, v) = error(post_json(&chat_url, &chat(2, false), &[]).await).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("no_healthy_target"))
    );
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_goes_on_from_the_last_target_list_when_control_is_down() {
    let mut cluster = Cluster::start(Shape { proxies: 1, ..Shape::default() }).await;
    let proxy = cluster.proxies[0].clone();
    cluster.stop_control().await;
    for i in 0..4 {
        let (s, text) = post_json(&format!("{proxy}/v1/chat/completions"), &chat(3, i % 2 == 0), &[]).await;
        assert_eq!(s, StatusCode::OK, "{text}");
    }
    let (_, metrics) = get(&format!("{proxy}/metrics")).await;
    let fallback: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("infera_proxy_fallback_picks_total"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(fallback >= 8.0, "4 requests × 2 legs routed locally: {metrics}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_control_gets_a_new_lease_and_books_again() {
    let mut cluster = Cluster::start(Shape { proxies: 1, ..Shape::default() }).await;
    let proxy = cluster.proxies[0].clone();
    let (s, _) = post_json(&format!("{proxy}/v1/chat/completions"), &chat(2, false), &[]).await;
    assert_eq!(s, StatusCode::OK);
    cluster.restart_control().await;
    // The new control knows no lease: the proxy's keep-alive gets unknown_lease and it opens
    // a new one. Requests keep being served meanwhile (locally, then through control again).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let leases = cluster
            .admin()
            .await
            .list_reservations(pb::ListReservationsRequest::default())
            .await
            .map(|_| ())
            .is_ok();
        let resp =
            send(&format!("{proxy}/v1/chat/completions"), Bytes::from(chat(4_000, true).to_string()), &[])
                .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        http_body_util::BodyExt::frame(&mut body).await.unwrap().unwrap();
        // Booked by the new control while the stream is open?
        if leases && cluster.ledger().await != Ledger::default() {
            drop(body);
            break;
        }
        drop(body);
        assert!(std::time::Instant::now() < deadline, "the proxy never booked with the new control");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

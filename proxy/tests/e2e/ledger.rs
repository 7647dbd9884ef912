//! The ledger returns to exactly zero however a request ends. One test per way of ending.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use infera_testkit::http::metric_sum;
use serde_json::{Value, json};

use crate::harness::*;

fn url(cluster: &Cluster, path: &str) -> String {
    format!("{}{path}", cluster.proxies[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_after_completions() {
    let cluster = Cluster::start(Shape::default()).await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let u = format!("{}/v1/chat/completions", cluster.proxies[i % 2]);
        tasks.push(tokio::spawn(async move { post_json(&u, &chat(8, i % 2 == 0), &[]).await }));
    }
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    cluster.ledger_returns_to_zero().await;
    // Finished answers, streamed or not, end as EOF, never as cancellations.
    let (mut eof, mut picks, mut batched) = (0.0, [0.0; 2], 0.0);
    for p in &cluster.proxies {
        let (_, metrics) = get(&format!("{p}/metrics")).await;
        assert!(!metrics.contains("infera_proxy_releases_total{reason=\"cancelled\"}"), "{metrics}");
        eof += metric_sum(&metrics, "infera_proxy_releases_total", "reason=\"eof\"");
        // Every pick control answered is timed, by kind.
        picks[0] += metric_sum(&metrics, "infera_proxy_pick_seconds_count", "kind=\"prefill\"");
        picks[1] += metric_sum(&metrics, "infera_proxy_pick_seconds_count", "kind=\"decode\"");
        // Every pick went out in a batch of the pick queue (one, or several in a PickMany).
        batched += metric_sum(&metrics, "infera_proxy_pick_batch_picks_sum", "");
    }
    assert_eq!(eof, 48.0, "24 requests × 2 legs");
    assert_eq!(picks, [24.0, 24.0]);
    assert_eq!(batched, 48.0);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_after_a_client_disconnects_mid_stream() {
    let cluster = Cluster::start(Shape::default()).await;
    let resp = send(
        &url(&cluster, "/v1/chat/completions"),
        Bytes::from(chat(4_000, true).to_string()),
        &[("x-request-id", "gone-1")],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some_and(|d| d.starts_with(b"data: ")));
    assert_ne!(cluster.ledger().await, Ledger::default(), "the decode reservation is held while streaming");
    drop(body);
    cluster.ledger_returns_to_zero().await;
    // The decode worker saw the request go away (SGLang aborts it).
    let r = eventually(Duration::from_secs(10), "the decode to see the disconnect", async || {
        let log = cluster.decode().requests().await;
        let r = log.iter().find(|r| r["rid"] == "gone-1").cloned().unwrap();
        (r["outcome"] != "ok" && !r["outcome"].is_null() && r["outcome"] != "running").then_some(r)
    })
    .await;
    assert!(["client_gone", "aborted"].contains(&r["outcome"].as_str().unwrap()), "{r}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_after_the_decode_dies_mid_stream() {
    let cluster = Cluster::start(Shape::default()).await;
    cluster.decode().faults(json!({"die_after_tokens": 3})).await;
    let (status, text) = post_json(&url(&cluster, "/v1/chat/completions"), &chat(50, true), &[]).await;
    assert_eq!(status, StatusCode::OK, "the stream had begun");
    let events = sse_events(&text);
    let err: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(err["error"]["type"], "server_error", "{text}");
    assert_eq!(events.last().unwrap(), "[DONE]");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_after_the_prefill_fails_while_the_decode_streams() {
    // The prefill breaks its connection once the decode has pulled the KV (die fault), and the
    // KV transfer takes ~200 ms of wall time, so the decode's stream has begun long before.
    let params = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(params.path(), "kv_bandwidth_bytes_per_s = 250000.0\n").unwrap();
    let prefill_flags = vec!["--sim-params".into(), params.path().to_str().unwrap().into()];
    let cluster = Cluster::start(Shape { proxies: 1, prefill_flags, ..Shape::default() }).await;
    cluster.prefill().unwrap().faults(json!({"die_after_tokens": 1})).await;
    let resp = send(
        &url(&cluster, "/v1/chat/completions"),
        Bytes::from(chat(4_000, true).to_string()),
        &[("x-request-id", "prefill-dies")],
    )
    .await;
    // The prefill's death races the decode's first token (both follow the end of the transfer):
    // an attempt whose prefill died first is retried (the same fault kills the next one's); once
    // a first token has reached the client, the death ends the stream with an error event.
    let status = resp.status();
    let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let err: Value = if status == StatusCode::OK {
        let events = sse_events(&text);
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{text}");
        serde_json::from_str(&events[events.len() - 2]).unwrap()
    } else {
        assert_eq!(status, StatusCode::BAD_GATEWAY, "every attempt's prefill died first: {text}");
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(err["error"]["code"], "upstream_error", "{text}");
    assert!(err["error"]["message"].as_str().unwrap().contains("prefill"), "{text}");
    cluster.ledger_returns_to_zero().await;
    // Both reservations of every attempt ended FAILED, and the decode was stopped long before its
    // 4,000 tokens.
    let (_, metrics) = get(&format!("{}/metrics", cluster.proxies[0])).await;
    let count = |series: &str| {
        metrics.lines().find_map(|l| l.strip_prefix(series)?.trim().parse::<u64>().ok()).unwrap_or(0)
    };
    let attempts = 1 + count("infera_proxy_retries_total");
    assert_eq!(count("infera_proxy_releases_total{reason=\"failed\"}"), 2 * attempts, "{metrics}");
    // One engine id per attempt: prefill-dies, prefill-dies-retry1, …
    let ours = |log: Vec<Value>| -> Vec<Value> {
        log.into_iter()
            .filter(|r| r["rid"].as_str().is_some_and(|id| id.starts_with("prefill-dies")))
            .collect()
    };
    let decodes = eventually(Duration::from_secs(10), "every decode to be stopped", async || {
        let log = ours(cluster.decode().requests().await);
        log.iter().all(|r| r["outcome"] != "running").then_some(log)
    })
    .await;
    assert_eq!(decodes.len() as u64, attempts, "{decodes:?}");
    for r in &decodes {
        assert!(["aborted", "client_gone"].contains(&r["outcome"].as_str().unwrap()), "{r}");
        assert!(r["completion_tokens"].as_u64().unwrap() < 4_000, "{r}");
    }
    let prefills = ours(cluster.prefill().unwrap().requests().await);
    assert_eq!(prefills.len() as u64, attempts, "{prefills:?}");
    assert!(prefills.iter().all(|p| p["outcome"] == "failed"), "{prefills:?}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_after_a_prefill_fails_and_the_retries_recover() {
    let cluster = Cluster::start(Shape::default()).await;
    let prefill = cluster.prefill().unwrap();
    // Two failures: the proxy picks again before the first byte (twice, --retries 2) and the
    // client never knows.
    prefill.faults(json!({"fail_next": 2})).await;
    let (status, text) = post_json(&url(&cluster, "/v1/chat/completions"), &chat(4, false), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (_, metrics) = get(&format!("{}/metrics", cluster.proxies[0])).await;
    assert!(metrics.contains("infera_proxy_retries_total 2"), "{metrics}");
    // Each attempt has its own engine id (an abort meant for one cannot end the next on the
    // same worker, and SGLang refuses an id it still holds).
    let rids: Vec<String> =
        prefill.requests().await.iter().map(|r| r["rid"].as_str().unwrap().to_owned()).collect();
    let first = rids[0].clone();
    assert_eq!(rids, [first.clone(), format!("{first}-retry1"), format!("{first}-retry2")]);
    cluster.ledger_returns_to_zero().await;
    // Three failures: the client gets an OpenAI error.
    prefill.faults(json!({"fail_next": 3})).await;
    let (status, text) = post_json(&url(&cluster, "/v1/chat/completions"), &chat(4, false), &[]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "upstream_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("prefill"), "{text}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_after_a_proxy_is_killed_by_its_lease_expiring() {
    let cluster = Cluster::start(Shape { proxies: 0, ..Shape::default() }).await;
    let mut proxy = spawn_proxy(cluster.control_addr, &["--lease-ttl-ms", "600"]).await;
    let addr = proxy.url.clone();
    wait_ready(&proxy).await;
    let resp =
        send(&format!("{addr}/v1/chat/completions"), Bytes::from(chat(4_000, true).to_string()), &[]).await;
    let mut body = resp.into_body();
    body.frame().await.unwrap().unwrap();
    assert_ne!(cluster.ledger().await, Ledger::default());
    proxy.node.kill(); // SIGKILL: no release, no CloseLease.
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_that_fails_is_retried_on_another_rank_and_reported_as_a_server_error() {
    let cluster = Cluster::start(Shape::default()).await;
    // One 500 from the decode worker: the retry's pick passes that rank by and succeeds.
    cluster.decode().faults(json!({"fail_next": 1})).await;
    let (status, text) = post_json(&url(&cluster, "/v1/chat/completions"), &chat(4, false), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let log = cluster.decode().requests().await;
    let ranks: Vec<&Value> = log.iter().map(|r| &r["routed_dp_rank"]).collect();
    assert_eq!(ranks.len(), 2, "{log:?}");
    assert_ne!(ranks[0], ranks[1], "the retry went to another rank: {log:?}");
    // Control hears how the failed leg failed (outlier ejection counts it against that rank);
    // releases reach it in the background.
    let series = "infera_router_leg_failures_total{kind=\"server_error\"} 1";
    eventually(Duration::from_secs(10), "control to count the failed leg as a server error", async || {
        cluster.control_metrics().await.lines().any(|l| l == series).then_some(())
    })
    .await;
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

//! `--request-timeout-ms`: no answer head in time is a 504 OpenAI error, both legs are let go,
//! and the ledger returns to exactly zero.

use std::time::{Duration, Instant};

use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::harness::*;

/// The proxies' request timeout: far above a normal answer on a loaded machine.
const TIMEOUT_MS: &str = "1000";

/// Waits (bounded) until the sim has ended request `rid` and returns its log entry.
async fn ended(sim: &Sim, rid: &str) -> Value {
    eventually(Duration::from_secs(10), &format!("the worker to end {rid}"), async || {
        let log = sim.requests().await;
        let r =
            log.iter().find(|r| r["rid"] == rid).cloned().unwrap_or_else(|| panic!("{rid} not in {log:?}"));
        (r["outcome"] != "running").then_some(r)
    })
    .await
}

/// A non-streamed chat through `proxy` that must time out: 504, OpenAI error JSON, the request
/// id echoed.
async fn times_out(proxy: &str, rid: &str) {
    let started = Instant::now();
    let resp = send(
        &format!("{proxy}/v1/chat/completions"),
        bytes::Bytes::from(chat(50, false).to_string()),
        &[("x-request-id", rid)],
    )
    .await;
    let status = resp.status();
    let echoed = resp.headers().get("x-request-id").cloned();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert_eq!(echoed.as_ref().map(|h| h.to_str().unwrap()), Some(rid));
    assert_eq!(
        (v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (Some("server_error"), Some("timeout"))
    );
    assert!(v["error"]["message"].is_string(), "{v}");
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "not before the timeout: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_an_answer_head_in_time_is_a_504_and_both_legs_are_let_go() {
    let shape =
        Shape { proxies: 1, proxy_flags: vec!["--request-timeout-ms", TIMEOUT_MS], ..Shape::default() };
    let cluster = Cluster::start(shape).await;
    let proxy = cluster.proxies[0].clone();
    let prefill = cluster.prefill().unwrap();

    // A normal answer comes well within the timeout.
    let (status, text) = post_json(&format!("{proxy}/v1/chat/completions"), &chat(4, false), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");

    // The decode stalls after 2 tokens: a whole (non-streamed) answer never gets its head.
    cluster.decode().faults(json!({"stall_after_tokens": 2})).await;
    times_out(&proxy, "stalled-decode").await;
    cluster.ledger_returns_to_zero().await;
    let d = ended(cluster.decode(), "stalled-decode").await;
    assert_eq!(
        (d["outcome"].as_str(), d["completion_tokens"].as_u64()),
        (Some("client_gone"), Some(2)),
        "{d}"
    );
    assert_eq!(ended(prefill, "stalled-decode").await["outcome"], "ok", "the prefill had finished");
    cluster.decode().faults(json!({"stall_after_tokens": null})).await;

    // The prefill stalls before its KV is ready: the decode waits for it, the prefill waits for
    // a decode that will never pull. Both must be let go, not left to their bootstrap timeout.
    prefill.faults(json!({"stall_after_tokens": 0})).await;
    times_out(&proxy, "stalled-prefill").await;
    cluster.ledger_returns_to_zero().await;
    let p = ended(prefill, "stalled-prefill").await;
    assert!(["aborted", "client_gone"].contains(&p["outcome"].as_str().unwrap()), "{p}");
    // The decode ends as its connection closes, or first as the aborted prefill fails its room.
    let d = ended(cluster.decode(), "stalled-prefill").await;
    assert!(["client_gone", "failed"].contains(&d["outcome"].as_str().unwrap()), "{d}");
    assert_eq!(d["completion_tokens"], 0, "it never got the KV: {d}");
    prefill.faults(json!({"stall_after_tokens": null})).await;

    let (_, metrics) = get(&format!("{proxy}/metrics")).await;
    assert!(
        metrics.contains("infera_proxy_requests_total{api=\"chat_completions\",model=\"m\",code=\"504\"} 2"),
        "{metrics}"
    );
    // Once the faults are gone, the same proxy answers again.
    let (status, text) = post_json(&format!("{proxy}/v1/chat/completions"), &chat(4, false), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

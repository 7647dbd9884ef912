//! Rendezvous failures: timeouts on either side, a failing or vanishing prefill, rank conflicts.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{pair, pd_body};
use crate::harness::{self, Events, Next, data_of};

#[tokio::test(flavor = "multi_thread")]
async fn the_decode_fails_after_the_bootstrap_timeout() {
    let (prefill, decode) = pair(&[], &["--sim-bootstrap-timeout-ms", "300"]).await;
    let mut events = Events::open(decode.http, "/v1/chat/completions", {
        let mut b = pd_body(&prefill, 3, 4, true);
        b["messages"] = json!([{"role": "user", "content": "x"}]);
        b
    })
    .await;
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    assert_eq!(all.last().map(String::as_str), Some("data: [DONE]"));
    let error = data_of(&all[all.len() - 2]).unwrap();
    assert_eq!(error["error"]["object"], "error");
    assert_eq!(error["error"]["code"], 500);
    assert!(error["error"]["message"].as_str().unwrap().contains("timed out"), "{error}");
    let (status, body) = decode.post("/generate", pd_body(&prefill, 4, 4, false)).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"].as_str().unwrap().contains("timed out"));
    harness::eventually("both failed", || async {
        decode.requests().await.iter().all(|e| e["outcome"] == "failed")
    })
    .await;
    assert_eq!(decode.load_sum("num_running_reqs").await, 0);
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prefill_fails_after_the_bootstrap_timeout() {
    let (prefill, decode) = pair(&["--sim-bootstrap-timeout-ms", "300"], &[]).await;
    let (status, body) = prefill.post("/generate", pd_body(&prefill, 5, 4, false)).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"].as_str().unwrap().contains("no decode pulled"), "{body}");
    // A late decode is told at once.
    let started = Instant::now();
    let (status, body) = decode.post("/generate", pd_body(&prefill, 5, 4, false)).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"].as_str().unwrap().contains("timed out after"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(10));
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_prefill_fails_the_waiting_decode_promptly() {
    let (prefill, decode) = pair(&[], &["--sim-bootstrap-timeout-ms", "60000"]).await;
    let mut events = Events::open(decode.http, "/generate", pd_body(&prefill, 21, 4, true)).await;
    harness::eventually("decode waiting", || async {
        decode.disagg_sum("decode_transfer_queue_reqs").await == 1
    })
    .await;
    prefill.post("/sim/faults", json!({"fail_next": 1})).await;
    let started = Instant::now();
    let (status, body) = prefill.post("/generate", pd_body(&prefill, 21, 4, false)).await;
    assert_eq!(status, 500, "{body}");
    let (all, end) = events.rest().await;
    assert!(started.elapsed() < Duration::from_secs(10), "not prompt: {:?}", started.elapsed());
    assert_eq!(end, Next::End);
    let error = data_of(&all[all.len() - 2]).unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("injected failure"), "{error}");
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prefill_client_that_hangs_up_fails_the_decode() {
    let (prefill, decode) = pair(&[], &["--sim-bootstrap-timeout-ms", "60000"]).await;
    let events = Events::open(prefill.http, "/generate", pd_body(&prefill, 31, 4, true)).await;
    harness::eventually("prefilled", || async {
        prefill.disagg_sum("prefill_inflight_queue_reqs").await == 1
    })
    .await;
    events.hang_up();
    harness::eventually("client_gone", || async { prefill.requests().await[0]["outcome"] == "client_gone" })
        .await;
    let (status, body) = decode.post("/generate", pd_body(&prefill, 31, 4, false)).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"].as_str().unwrap().contains("ended before the KV transfer"), "{body}");
    assert_eq!(prefill.load_sum("num_running_reqs").await, 0);
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn follow_bootstrap_room_pins_prefill_ranks() {
    let (prefill, decode) = pair(&["--dp-size", "2"], &["--sim-bootstrap-timeout-ms", "60000"]).await;
    // Unpinned: room % 2.
    let mut body = pd_body(&prefill, 9, 1, false);
    body["bootstrap_host"] = json!("2.2.2.2");
    assert_eq!(prefill.post("/generate", body).await.1["meta_info"]["dp_rank"], 1);
    // Pinned against the room without disagg_prefill_dp_rank: the prefill fails, and so does its decode.
    let d_addr = decode.http;
    let d_body = pd_body(&prefill, 41, 4, false);
    let decode_leg = tokio::spawn(async move { harness::post(d_addr, "/generate", d_body).await.unwrap() });
    let mut p_body = pd_body(&prefill, 41, 4, false);
    p_body["routed_dp_rank"] = json!(0);
    let (status, body) = prefill.post("/generate", p_body).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"].as_str().unwrap().contains("follow_bootstrap_room conflict"), "{body}");
    assert_eq!(decode_leg.await.unwrap().0, 500);
    // With disagg_prefill_dp_rank the pin is honoured; a decode expecting another rank is refused.
    let mut p_body = pd_body(&prefill, 43, 4, false);
    p_body["routed_dp_rank"] = json!(0);
    p_body["disagg_prefill_dp_rank"] = json!(0);
    let p_addr = prefill.http;
    let prefill_leg = tokio::spawn(async move { harness::post(p_addr, "/generate", p_body).await.unwrap() });
    let mut wrong = pd_body(&prefill, 43, 4, false);
    wrong["disagg_prefill_dp_rank"] = json!(1);
    let (status, body) = decode.post("/generate", wrong).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"].as_str().unwrap().contains("dp rank 0"), "{body}");
    let mut right = pd_body(&prefill, 43, 4, false);
    right["disagg_prefill_dp_rank"] = json!(0);
    assert_eq!(decode.post("/generate", right).await.0, 200);
    assert_eq!(prefill_leg.await.unwrap().0, 200);
    prefill.stop().await;
    decode.stop().await;
}

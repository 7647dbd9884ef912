//! Both legs meet: same room, the prefill answers after the pull, the decode waits for it.

use std::time::Duration;

use serde_json::json;

use super::{pair, pd_body};
use crate::harness::{self, Events, Next, data_of};

#[tokio::test(flavor = "multi_thread")]
async fn both_legs_carry_the_same_room_and_the_decode_streams_the_tokens() {
    let (prefill, decode) = pair(&["--dp-size", "2"], &["--dp-size", "4"]).await;
    let room = 5_163_923_463_823_455_143_u64;
    let mut p_body = pd_body(&prefill, room, 8, false);
    p_body["routed_dp_rank"] = json!(1);
    let mut d_body = pd_body(&prefill, room, 8, true);
    d_body["routed_dp_rank"] = json!(3);
    d_body["disagg_prefill_dp_rank"] = json!(1);
    let p_addr = prefill.http;
    let prefill_leg = tokio::spawn(async move { harness::post(p_addr, "/generate", p_body).await.unwrap() });
    let mut events = Events::open(decode.http, "/generate", d_body).await;
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    assert_eq!(all.last().map(String::as_str), Some("data: [DONE]"));
    let last = data_of(&all[all.len() - 2]).unwrap();
    assert_eq!(last["meta_info"]["completion_tokens"], 8);
    assert_eq!(last["meta_info"]["dp_rank"], 3);
    let (status, body) = prefill_leg.await.unwrap();
    assert_eq!(status, 200);
    let p: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(p["meta_info"]["finish_reason"], json!({"type": "length", "length": 0}));
    assert!(p["meta_info"]["completion_tokens"].as_u64().unwrap() <= 1);
    assert_eq!(p["meta_info"]["dp_rank"], 1);
    let (p_log, d_log) = (prefill.requests().await, decode.requests().await);
    assert_eq!((p_log[0]["room"].as_u64(), d_log[0]["room"].as_u64()), (Some(room), Some(room)));
    assert_eq!((&p_log[0]["dp_rank_used"], &d_log[0]["dp_rank_used"]), (&json!(1), &json!(3)));
    assert_eq!(d_log[0]["disagg_prefill_dp_rank"], 1);
    assert_eq!(d_log[0]["bootstrap_host"], "127.0.0.1");
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prefill_answers_only_after_the_decode_pulled() {
    let (prefill, decode) = pair(&[], &[]).await;
    let p_addr = prefill.http;
    let p_body = pd_body(&prefill, 7, 4, false);
    let prefill_leg = tokio::spawn(async move { harness::post(p_addr, "/generate", p_body).await.unwrap() });
    harness::eventually("prefilled and holding for the transfer", || async {
        prefill.disagg_sum("prefill_inflight_queue_reqs").await == 1
    })
    .await;
    // Prefilled long ago in model time; still no answer because nobody pulled.
    let early = tokio::time::timeout(Duration::from_millis(200), async {
        while !prefill_leg.is_finished() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(early.is_err(), "the prefill answered before any decode pulled");
    let (status, body) = decode.post("/generate", pd_body(&prefill, 7, 4, false)).await;
    assert_eq!(status, 200);
    assert_eq!(body["meta_info"]["completion_tokens"], 4);
    let (status, _) = prefill_leg.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(prefill.disagg_sum("prefill_inflight_queue_reqs").await, 0);
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_decode_waits_for_its_prefill() {
    let (prefill, decode) = pair(&[], &[]).await;
    let mut events = Events::open(decode.http, "/generate", pd_body(&prefill, 11, 6, true)).await;
    assert_eq!(events.status, 200);
    harness::eventually("waiting for the KV", || async {
        decode.disagg_sum("decode_transfer_queue_reqs").await == 1
    })
    .await;
    let early = tokio::time::timeout(Duration::from_millis(200), events.next()).await;
    assert!(early.is_err(), "the decode streamed before its prefill ran: {early:?}");
    assert_eq!(decode.load_sum("num_running_reqs").await, 0);
    let (status, _) = prefill.post("/generate", pd_body(&prefill, 11, 6, false)).await;
    assert_eq!(status, 200);
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    let last = data_of(&all[all.len() - 2]).unwrap();
    assert_eq!(last["meta_info"]["completion_tokens"], 6);
    assert_eq!(decode.disagg_sum("decode_transfer_queue_reqs").await, 0);
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cached_prefix_on_the_prefill_is_reported_by_the_decode() {
    let (prefill, decode) = pair(&[], &[]).await;
    for room in [1_u64, 2] {
        let p_addr = prefill.http;
        let p_body = pd_body(&prefill, room, 2, false);
        let leg = tokio::spawn(async move { harness::post(p_addr, "/generate", p_body).await.unwrap() });
        let (_, body) = decode.post("/generate", pd_body(&prefill, room, 2, false)).await;
        let cached = body["meta_info"]["cached_tokens"].as_u64().unwrap();
        assert_eq!(cached > 0, room == 2, "room {room}: cached {cached}");
        assert_eq!(leg.await.unwrap().0, 200);
    }
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_check_requests_need_no_peer() {
    let (prefill, decode) = pair(&[], &[]).await;
    for sim in [&prefill, &decode] {
        let body = json!({"input_ids": [0], "sampling_params": {"max_new_tokens": 1},
                          "bootstrap_host": "2.2.2.2", "bootstrap_room": 0});
        let (status, body) = sim.post("/generate", body).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, ok) = harness::get(prefill.bootstrap.unwrap(), "/health").await;
    assert_eq!((status.as_u16(), &ok[..]), (200, &b"OK"[..]));
    let (status, info) = prefill.get("/server_info").await;
    assert_eq!(status, 200);
    assert_eq!(info["disaggregation_bootstrap_port"], prefill.bootstrap.unwrap().port());
    prefill.stop().await;
    decode.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pd_roles_need_bootstrap_fields() {
    let (prefill, decode) = pair(&[], &[]).await;
    for sim in [&prefill, &decode] {
        let (status, body) = sim.post("/generate", json!({"text": "x"})).await;
        assert_eq!(status, 400);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("Invalid request: Disaggregated request received without bootstrap room id."),
            "{body}"
        );
    }
    prefill.stop().await;
    decode.stop().await;
}

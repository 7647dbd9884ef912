//! Fault knobs (fail, stall, die) and client disconnects.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{self, Events, Next, Sim, data_of};

fn tokens_of(event: &Value) -> u64 {
    event["meta_info"]["completion_tokens"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn fail_next_fails_that_many_requests_with_500() {
    let sim = Sim::start(&["--sim-fail-next", "1", "--sim-speedup", "100"]).await;
    let (status, body) = sim.post("/generate", json!({"text": "x"})).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"].as_str().unwrap().contains("injected failure"));
    assert_eq!(sim.post("/generate", json!({"text": "x"})).await.0, 200);
    let (status, knobs) = sim.post("/sim/faults", json!({"fail_next": 2})).await;
    assert_eq!((status.as_u16(), &knobs["fail_next"]), (200, &json!(2)));
    let chat = json!({"messages": [{"role": "user", "content": "x"}], "stream": true});
    for _ in 0..2 {
        let (status, body) = sim.post("/v1/chat/completions", chat.clone()).await;
        assert_eq!(status, 500);
        assert_eq!((body["object"].as_str(), body["code"].as_u64()), (Some("error"), Some(500)));
        assert_eq!(body["type"], "InternalServerError");
    }
    assert_eq!(sim.post("/v1/chat/completions", chat).await.0, 200);
    let outcomes: Vec<Value> = sim.requests().await.iter().map(|e| e["outcome"].clone()).collect();
    assert_eq!(outcomes[..4], [json!("failed"), json!("ok"), json!("failed"), json!("failed")]);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stall_holds_the_connection_until_the_client_leaves() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    sim.post("/sim/faults", json!({"stall_after_tokens": 3})).await;
    let body = json!({"text": "x", "sampling_params": {"max_new_tokens": 50}, "stream": true});
    let mut events = Events::open(sim.http, "/generate", body).await;
    let mut tokens = 0;
    while tokens < 3 {
        tokens = tokens_of(&events.data().await);
    }
    assert_eq!(tokens, 3);
    // 300 ms at speedup 100 is 30 s of model time: hundreds of steps would have run.
    let more = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(more.is_err(), "a stalled stream sends nothing: {more:?}");
    assert_eq!(sim.load_sum("num_running_reqs").await, 1, "the stalled request keeps its slot");
    events.hang_up();
    harness::eventually("client_gone", || async { sim.requests().await[0]["outcome"] == "client_gone" })
        .await;
    assert_eq!(sim.load_sum("num_running_reqs").await, 0);
    let (_, knobs) = sim.post("/sim/faults", json!({"stall_after_tokens": null})).await;
    assert!(knobs["stall_after_tokens"].is_null());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn die_closes_the_connection_without_done() {
    let sim = Sim::start(&["--sim-speedup", "100", "--sim-die-after-tokens", "2"]).await;
    let body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10, "stream": true});
    let mut events = Events::open(sim.http, "/v1/chat/completions", body).await;
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::Broken);
    assert!(!all.iter().any(|e| e.contains("[DONE]")));
    let content: String = all
        .iter()
        .filter_map(|e| data_of(e))
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(content.split(' ').count(), 2, "{content:?}");
    let whole = harness::post(sim.http, "/generate", json!({"text": "x"})).await;
    assert!(whole.is_err(), "a non-stream response breaks off too: {whole:?}");
    harness::eventually("both failed", || async {
        sim.requests().await.iter().all(|e| e["outcome"] == "failed")
    })
    .await;
    assert_eq!(sim.requests().await[0]["completion_tokens"], 2);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_hangs_up_mid_stream_frees_its_slot() {
    let sim = Sim::start(&["--dp-size", "2"]).await;
    let body = json!({"prompt": "x", "max_tokens": 100000, "stream": true});
    let mut events = Events::open(sim.http, "/v1/completions", body).await;
    events.data().await;
    assert_eq!(sim.load_sum("num_running_reqs").await, 1);
    events.hang_up();
    harness::eventually("client_gone", || async { sim.requests().await[0]["outcome"] == "client_gone" })
        .await;
    assert_eq!(sim.load_sum("num_running_reqs").await, 0);
    assert_eq!(sim.load_sum("num_used_tokens").await, 0);
    sim.stop().await;
}

//! DP rank choice: `routed_dp_rank` and its aliases, out-of-range 400s, round robin.

use serde_json::json;

use crate::harness::{self, Sim};

#[tokio::test(flavor = "multi_thread")]
async fn a_routed_rank_is_used_and_echoed() {
    let sim = Sim::start(&["--dp-size", "4", "--sim-speedup", "100"]).await;
    let body = json!({"text": "x", "sampling_params": {"max_new_tokens": 1}, "routed_dp_rank": 3});
    assert_eq!(sim.post("/generate", body).await.1["meta_info"]["dp_rank"], 3);
    let body = json!({"text": "x", "sampling_params": {"max_new_tokens": 1}, "data_parallel_rank": 2});
    assert_eq!(sim.post("/generate", body).await.1["meta_info"]["dp_rank"], 2);
    let chat = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "routed_dp_rank": 0});
    let req = harness::json_request("/v1/chat/completions", &chat, &[("X-Data-Parallel-Rank", "1")]);
    let (response, _conn) = harness::send(sim.http, req).await;
    assert_eq!(response.status(), 200);
    let log = sim.requests().await;
    let ranks: Vec<_> =
        log.iter().map(|e| (e["routed_dp_rank"].clone(), e["dp_rank_used"].clone())).collect();
    assert_eq!(
        ranks,
        [(json!(3), json!(3)), (json!(2), json!(2)), (json!(1), json!(1))],
        "the header wins on OpenAI routes"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_out_of_range_rank_is_a_400() {
    let sim = Sim::start(&["--dp-size", "4"]).await;
    let (status, body) = sim.post("/generate", json!({"text": "x", "routed_dp_rank": 4})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["message"], "routed_dp_rank=4 out of range [0, 4)");
    let (status, body) = sim.post("/v1/completions", json!({"prompt": "x", "routed_dp_rank": -1})).await;
    assert_eq!(status, 400);
    assert_eq!(body["message"], "routed_dp_rank=-1 out of range [0, 4)");
    assert_eq!(body["type"], "BadRequestError");
    let log = sim.requests().await;
    assert!(log.iter().all(|e| e["outcome"] == "failed" && e["dp_rank_used"].is_null()));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unrouted_requests_take_the_ranks_in_turn() {
    let sim = Sim::start(&["--dp-size", "3", "--sim-speedup", "100"]).await;
    let mut ranks = Vec::new();
    for _ in 0..6 {
        let (_, body) =
            sim.post("/generate", json!({"text": "x", "sampling_params": {"max_new_tokens": 1}})).await;
        ranks.push(body["meta_info"]["dp_rank"].as_u64().unwrap());
    }
    assert_eq!(ranks, [0, 1, 2, 0, 1, 2]);
    sim.stop().await;
}

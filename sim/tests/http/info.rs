//! Control endpoints: health, server and model info, loads, flush, abort.

use serde_json::json;

use crate::harness::{self, Events, Sim};

#[tokio::test(flavor = "multi_thread")]
async fn health_and_info_endpoints_answer_in_sglang_shapes() {
    let sim = Sim::start(&[
        "--tp-size",
        "8",
        "--attn-dp-size",
        "4",
        "--disaggregation-mode",
        "decode",
        "--page-size",
        "64",
    ])
    .await;
    for path in ["/health", "/health_generate", "/ready"] {
        let (status, body) = harness::get(sim.http, path).await;
        assert_eq!((status.as_u16(), body.len()), (200, 0), "{path}");
    }
    let (status, info) = sim.get("/server_info").await;
    assert_eq!(status, 200);
    assert_eq!(info["disaggregation_mode"], "decode");
    assert_eq!(info["dp_size"], 1, "0.5.22+: replicas");
    assert_eq!(info["attn_dp_size"], 4);
    assert_eq!(info["enable_dp_attention"], true);
    assert_eq!(info["tp_size"], 8);
    assert_eq!(info["page_size"], 64);
    assert_eq!(info["disaggregation_bootstrap_port"], 8998);
    assert_eq!(info["version"], "0.5.23");
    assert_eq!(info["frontend"], "python");
    assert!(info["kv_events"].is_null());
    assert_eq!(info["internal_states"].as_array().unwrap().len(), 4);
    assert_eq!(sim.get("/get_server_info").await.1["attn_dp_size"], 4);
    let (_, model) = sim.get("/model_info").await;
    assert_eq!(model["model_path"], "m");
    assert_eq!(model["disaggregation_mode"], "decode");
    assert_eq!(sim.get("/get_model_info").await.1["is_generation"], true);
    let (_, models) = sim.get("/v1/models").await;
    assert_eq!(models["data"][0]["owned_by"], "sglang");
    assert_eq!(models["data"][0]["id"], "m");
    assert_eq!(models["data"][0]["root"], "m");
    assert_eq!(sim.get("/nope").await.0, 404);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_info_override_replaces_and_removes_keys() {
    let sim = Sim::start(&[
        "--attn-dp-size",
        "4",
        "--sim-server-info-override",
        r#"{"dp_size": "four", "attn_dp_size": null}"#,
    ])
    .await;
    let (_, info) = sim.get("/server_info").await;
    assert_eq!(info["dp_size"], "four");
    assert!(info.get("attn_dp_size").is_none());
    assert_eq!(info["internal_states"].as_array().unwrap().len(), 4, "the ranks themselves are unchanged");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn old_versions_report_dp_size_as_ranks() {
    let sim =
        Sim::start(&["--dp-size", "2", "--enable-dp-attention", "--sim-sglang-version", "0.5.21"]).await;
    let (_, info) = sim.get("/server_info").await;
    assert_eq!(info["dp_size"], 2);
    assert!(info.get("attn_dp_size").is_none());
    assert_eq!(info["version"], "0.5.21");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn loads_have_one_entry_per_rank_and_filter_sections() {
    let sim = Sim::start(&["--dp-size", "3", "--disaggregation-mode", "decode"]).await;
    let (status, loads) = sim.get("/v1/loads?include=core,disagg").await;
    assert_eq!(status, 200);
    assert_eq!(loads["version"], "0.5.23");
    let entries = loads["loads"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    for (rank, e) in entries.iter().enumerate() {
        assert_eq!(e["dp_rank"], rank);
        assert_eq!(e["num_running_reqs"], 0);
        assert_eq!(e["num_waiting_reqs"], 0);
        assert_eq!(e["num_used_tokens"], 0);
        assert_eq!(e["disaggregation"]["mode"], "decode");
        assert!(e.get("memory").is_none() && e.get("queues").is_none());
    }
    let (_, one) = sim.get("/v1/loads?dp_rank=2").await;
    assert_eq!(one["loads"].as_array().unwrap().len(), 1);
    assert!(one["loads"][0].get("queues").is_some());
    // SGLang 0.5.23 fails an unknown section in the scheduler: a bare 500.
    let (status, body) = harness::get(sim.http, "/v1/loads?include=core,bogus").await;
    assert_eq!((status.as_u16(), &body[..]), (500, &b"Internal Server Error"[..]));
    let (status, bad) = sim.get("/v1/loads?dp_rank=x").await;
    assert_eq!((status.as_u16(), &bad["type"]), (400, &json!("Bad Request")));
    let (status, text) = harness::get(sim.http, "/v1/loads?format=prometheus&include=core").await;
    let text = String::from_utf8(text.to_vec()).unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank=\"0\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("sglang_max_total_num_tokens{dp_rank=\"2\"} "), "{text}");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn flush_cache_empties_the_prefix_cache() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let body = json!({"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 1}});
    sim.post("/generate", body.clone()).await;
    assert_eq!(sim.post("/generate", body.clone()).await.1["meta_info"]["cached_tokens"], 3);
    for flush in [
        harness::get(sim.http, "/flush_cache").await,
        harness::post(sim.http, "/flush_cache", json!({})).await.unwrap(),
    ] {
        assert_eq!(flush.0, 200);
        assert!(String::from_utf8_lossy(&flush.1).starts_with("Cache flushed."));
    }
    assert_eq!(sim.post("/generate", body).await.1["meta_info"]["cached_tokens"], 0);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_request_ends_a_stream_with_an_abort_finish() {
    let sim = Sim::start(&[]).await;
    let body =
        json!({"text": "x", "rid": "long", "sampling_params": {"max_new_tokens": 100000}, "stream": true});
    let mut events = Events::open(sim.http, "/generate", body).await;
    let first = events.data().await;
    assert!(first["meta_info"]["finish_reason"].is_null());
    let (status, _) = sim.post("/abort_request", json!({"rid": "long"})).await;
    assert_eq!(status, 200);
    let (rest, _) = events.rest().await;
    assert_eq!(rest.last().map(String::as_str), Some("data: [DONE]"));
    let last = crate::harness::data_of(&rest[rest.len() - 2]).unwrap();
    assert_eq!(last["meta_info"]["finish_reason"]["type"], "abort");
    harness::eventually("the log says aborted", || async { sim.requests().await[0]["outcome"] == "aborted" })
        .await;
    assert_eq!(sim.load_sum("num_running_reqs").await, 0);
    sim.stop().await;
}

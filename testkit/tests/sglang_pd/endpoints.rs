//! The requests any worker of a model answers, through the proxy to real SGLang 0.5.23 PD
//! workers: the tokenizer routes answer as the worker does, the model's and the server's facts
//! are a worker's, `/health_generate` makes the prefill and the decode each generate, and
//! `/v1/models/{id}` names the model (`proxy/src/any_worker.rs`).

use infera_testkit::http;
use serde_json::{Value, json};

use super::sglang::{cluster_over, run};
use super::{MODEL, world};

#[test]
fn the_any_worker_routes_answer_as_the_workers_do() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, w.pd_records()).await;
        let proxy = cluster.proxies[0].url.clone();
        let worker = w.decode.url.clone();

        let tokenize = json!({"model": MODEL, "prompt": "The quick brown fox"});
        let (status, via_proxy) = http::post_json(&format!("{proxy}/v1/tokenize"), &tokenize).await.unwrap();
        assert!(status.is_success(), "{status} {via_proxy}");
        let (_, direct) = http::post_json(&format!("{worker}/v1/tokenize"), &tokenize).await.unwrap();
        let (via_proxy, direct): (Value, Value) =
            (serde_json::from_str(&via_proxy).unwrap(), serde_json::from_str(&direct).unwrap());
        assert_eq!(via_proxy, direct, "the worker's own answer");
        let tokens = via_proxy["tokens"].as_array().unwrap_or_else(|| panic!("{via_proxy}")).clone();
        assert!(!tokens.is_empty());

        let detokenize = json!({"model": MODEL, "tokens": tokens});
        let (status, text) = http::post_json(&format!("{proxy}/v1/detokenize"), &detokenize).await.unwrap();
        assert!(status.is_success(), "{status} {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["text"].as_str().is_some_and(|t| t.contains("quick brown fox")), "{v}");

        let info = http::get_json(&format!("{proxy}/get_model_info?model={MODEL}")).await.unwrap();
        let direct = http::get_json(&format!("{worker}/get_model_info")).await.unwrap();
        assert_eq!(info["model_path"], direct["model_path"], "{info}");
        let server = http::get_json(&format!("{proxy}/get_server_info")).await.unwrap();
        assert_eq!(server["served_model_name"], MODEL, "{server}");
        assert!(
            ["prefill", "decode"].contains(&server["disaggregation_mode"].as_str().unwrap_or("")),
            "{server}"
        );

        // Both roles generate a token, each with SGLang's own /health_generate.
        let (status, text) = http::get(&format!("{proxy}/health_generate")).await.unwrap();
        assert_eq!(status.as_u16(), 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["workers_checked"], 2, "one prefill and the decode: {v}");

        let model = http::get_json(&format!("{proxy}/v1/models/{MODEL}")).await.unwrap();
        assert_eq!(model["id"], MODEL, "{model}");
        let (status, text) = http::get(&format!("{proxy}/v1/models/nope")).await.unwrap();
        assert_eq!(status.as_u16(), 404, "{text}");

        w.all_idle().await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

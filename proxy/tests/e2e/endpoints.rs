//! The serving surface beyond generation: the pooling APIs (embeddings, rerank, classify) picked
//! on load through control; the routes any worker of the model answers (tokenize, detokenize,
//! model and server info, `/health_generate`); `/v1/models/{id}`.

use futures_util::StreamExt;
use http::StatusCode;
use infera_proto::pb;
use serde_json::{Value, json};

use crate::harness::*;

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooling_apis_are_picked_on_load_and_leave_the_ledger_at_zero() {
    let shape = Shape {
        pd: false,
        decode_dp: 1,
        proxies: 1,
        decode_flags: vec!["--is-embedding".into()],
        ..Shape::default()
    };
    let cluster = Cluster::start(shape).await;
    let proxy = &cluster.proxies[0];
    let mut decisions = cluster.decisions().await;

    let one = json!({"model": MODEL, "input": "The KV cache holds the prompt."});
    let (status, text) =
        post_json(&format!("{proxy}/v1/embeddings"), &one, &[("x-request-id", "emb-1")]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v = parse(&text);
    assert_eq!(v["object"], "list", "{v}");
    assert!(v["data"][0]["embedding"].as_array().is_some_and(|e| !e.is_empty()), "{v}");
    assert!(v["usage"]["prompt_tokens"].as_u64().is_some_and(|n| n > 0), "{v}");
    // The one input kept the request's id on the engine.
    let log = cluster.decode().requests().await;
    assert!(log.iter().any(|r| r["rid"] == "emb-1"), "{log:?}");

    let batch = json!({"model": MODEL, "input": ["first", "second", "third"]});
    let (status, text) = post_json(&format!("{proxy}/v1/embeddings"), &batch, &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(parse(&text)["data"].as_array().map(Vec::len), Some(3), "{text}");

    let rerank = json!({"query": "what is decode?", "documents": ["decode makes tokens", "prefill reads"], "top_n": 1});
    let (status, text) = post_json(&format!("{proxy}/v1/rerank"), &rerank, &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(parse(&text).as_array().map(Vec::len), Some(1), "top_n = 1: {text}");

    let classify = json!({"model": MODEL, "input": "infera routes requests"});
    let (status, text) = post_json(&format!("{proxy}/v1/classify"), &classify, &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(parse(&text)["data"][0]["probs"].is_array(), "{text}");

    // Each went through one decode pick, none through a prefill.
    let mut picks = 0;
    while picks < 4 {
        let e = decisions.next().await.unwrap().unwrap();
        assert_eq!(e.kind, pb::PickKind::Decode as i32, "{e:?}");
        picks += 1;
    }
    // Bad input is the client's error, and still books nothing.
    let (status, text) = post_json(&format!("{proxy}/v1/embeddings"), &json!({"model": MODEL}), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pd_model_refuses_pooling_and_any_worker_answers_the_tokenizer_and_info_routes() {
    let cluster = Cluster::start(Shape { proxies: 1, decode_dp: 2, ..Shape::default() }).await;
    let proxy = &cluster.proxies[0];

    let (status, text) =
        post_json(&format!("{proxy}/v1/embeddings"), &json!({"model": MODEL, "input": "x"}), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(parse(&text)["error"]["code"], "model_not_served_aggregated", "{text}");

    // Tokenize, then detokenize, through the proxy; the counts agree with the worker's own.
    let prompt = json!({"model": MODEL, "prompt": "Prefill and decode run apart."});
    let (status, text) =
        post_json(&format!("{proxy}/v1/tokenize"), &prompt, &[("x-request-id", "tok-1")]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let tokens = parse(&text);
    let ids = tokens["tokens"].as_array().unwrap().clone();
    assert_eq!(tokens["count"].as_u64(), Some(ids.len() as u64), "{tokens}");
    let (direct_status, direct) =
        post_json(&format!("{}/v1/tokenize", cluster.decode().url), &prompt, &[]).await;
    assert_eq!(direct_status, StatusCode::OK);
    assert_eq!(parse(&direct)["tokens"], tokens["tokens"], "the proxy relays the worker's answer");
    let (status, text) = post_json(&format!("{proxy}/detokenize"), &json!({"tokens": ids}), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(parse(&text)["text"].is_string(), "{text}");

    for path in ["/get_model_info", "/get_server_info", "/model_info", "/server_info?model=m"] {
        let (status, text) = get(&format!("{proxy}{path}")).await;
        assert_eq!(status, StatusCode::OK, "{path}: {text}");
        assert!(parse(&text).is_object(), "{path}: {text}");
    }
    let (status, text) = get(&format!("{proxy}/get_model_info?model=other")).await;
    assert_eq!(
        (status, parse(&text)["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!("model_not_found"))
    );

    let (status, text) = get(&format!("{proxy}/v1/models/{MODEL}")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(parse(&text)["id"], MODEL);
    let (status, _) = get(&format!("{proxy}/v1/models/other")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // One prefill and one decode generate a token.
    let (status, text) = get(&format!("{proxy}/health_generate")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(parse(&text)["workers_checked"], 2, "{text}");
    let (status, text) = get(&format!("{proxy}/health_generate?model=other")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert_eq!(parse(&text)["failures"][0]["error"], "no worker takes requests", "{text}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

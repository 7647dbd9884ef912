//! The pooling routes (`/v1/embeddings`, `/v1/classify`, `/v1/rerank`) in SGLang 0.5.23's
//! shapes, and their requests in the engine.

use serde_json::{Value, json};

use crate::harness::{self, Sim};

/// The sim's hidden size without a model `config.json` (`model_config::DEFAULT_HIDDEN_SIZE`).
const HIDDEN: usize = 1024;

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[tokio::test(flavor = "multi_thread")]
async fn embeddings_of_a_string_and_a_batch_are_deterministic_unit_vectors() {
    let sim = Sim::start(&["--is-embedding", "--sim-speedup", "100", "--served-model-name", "served"]).await;
    let (status, one) = sim.post("/v1/embeddings", json!({"input": "hello world", "model": "served"})).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!((&one["object"], &one["model"]), (&json!("list"), &json!("m")), "SGLang names the model path");
    assert_eq!(one["data"].as_array().unwrap().len(), 1);
    assert_eq!((&one["data"][0]["object"], &one["data"][0]["index"]), (&json!("embedding"), &json!(0)));
    let a = floats(&one["data"][0]["embedding"]);
    assert_eq!(a.len(), HIDDEN);
    assert!((norm(&a) - 1.0).abs() < 1e-4, "unit length: {}", norm(&a));
    // "hello world" is 11 bytes: 3 of the sim's tokens.
    assert_eq!(one["usage"]["prompt_tokens"], 3);
    assert_eq!(one["usage"]["total_tokens"], 3);
    assert_eq!(one["usage"]["completion_tokens"], 0);
    let (_, again) = sim.post("/v1/embeddings", json!({"input": "hello world"})).await;
    assert_eq!(again["data"][0]["embedding"], one["data"][0]["embedding"], "same input, same vector");

    let (status, batch) = sim.post("/v1/embeddings", json!({"input": ["hello world", "abcd"]})).await;
    assert_eq!(status, 200, "{batch}");
    let data = batch["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!((&data[0]["index"], &data[1]["index"]), (&json!(0), &json!(1)));
    assert_eq!(data[0]["embedding"], one["data"][0]["embedding"], "an input is embedded alike in a batch");
    let b = floats(&data[1]["embedding"]);
    assert_ne!(a, b);
    assert!((norm(&b) - 1.0).abs() < 1e-4);
    assert_eq!(batch["usage"]["prompt_tokens"], 4, "3 + 1 tokens");

    let (_, ids) = sim.post("/v1/embeddings", json!({"input": [[1, 2, 3], [4]]})).await;
    assert_eq!((ids["data"].as_array().unwrap().len(), &ids["usage"]["prompt_tokens"]), (2, &json!(4)));
    let (_, b64) =
        sim.post("/v1/embeddings", json!({"input": "hello world", "encoding_format": "base64"})).await;
    let text = b64["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(text.len(), (HIDDEN * 4).div_ceil(3) * 4, "little-endian float32, base64");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generation_model_refuses_embeddings_as_sglang_does() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let refusal = "This model does not appear to be an embedding model by default. Please add `--is-embedding` when launching the server or try another model.";
    for path in ["/v1/embeddings", "/v1/classify"] {
        let (status, body) = sim.post(path, json!({"input": "hello"})).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(
            (&body["object"], &body["type"], &body["code"]),
            (&json!("error"), &json!("BadRequestError"), &json!(400))
        );
        assert_eq!(body["message"], refusal, "{path}");
    }
    // Checks before the model's: the handler's, then the length.
    let (_, body) = sim.post("/v1/embeddings", json!({"input": " "})).await;
    assert_eq!(body["message"], "Input cannot be empty or whitespace only");
    let (_, body) = sim.post("/v1/embeddings", json!({"input": [1, -2]})).await;
    assert_eq!(body["message"], "Token ID at index 1 must be non-negative");
    let (_, body) = sim.post("/v1/embeddings", json!({"input": "x", "encoding_format": "int8"})).await;
    assert_eq!(body["message"], "encoding_format must be either 'float' or 'base64', got 'int8'");
    let (status, body) = sim.post("/v1/embeddings", json!({"model": "m"})).await;
    assert_eq!((status.as_u16(), &body["type"]), (400, &json!("Bad Request")), "FastAPI's validation");
    assert_eq!(sim.get("/model_info").await.1["is_generation"], true);
    assert!(sim.requests().await.is_empty(), "nothing refused reached the engine");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_embedding_model_refuses_generation_and_reports_itself() {
    let sim = Sim::start(&["--is-embedding", "--context-length", "16"]).await;
    let (status, body) =
        sim.post("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!((status.as_u16(), &body["type"]), (400, &json!("BadRequestError")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("embedding model"), "{body}");
    let (status, body) = sim.post("/generate", json!({"text": "hi"})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("--is-embedding"), "{body}");
    let (status, body) = sim.post("/v1/embeddings", json!({"input": "x".repeat(100)})).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["message"],
        "The input (25 tokens) is longer than the model's context length (16 tokens)."
    );
    let (_, body) = sim.post("/v1/embeddings", json!({"input": "x", "dimensions": 4})).await;
    assert_eq!(
        body["message"],
        "Model 'm' does not support matryoshka representation, changing output dimensions will lead to poor results."
    );
    let (_, info) = sim.get("/get_server_info").await;
    assert_eq!(info["is_embedding"], true);
    let (_, model) = sim.get("/model_info").await;
    assert_eq!((&model["is_generation"], &model["embedding"]["enabled"]), (&json!(false), &json!(true)));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn classify_gives_probabilities_over_the_labels() {
    let sim = Sim::start(&["--is-embedding", "--sim-speedup", "100"]).await;
    let (status, body) = sim.post("/v1/classify", json!({"input": ["good", "bad"], "model": "m"})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("classify-"));
    assert_eq!((&body["object"], &body["model"]), (&json!("list"), &json!("m")));
    assert!(body["created"].as_u64().unwrap() > 0);
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i);
        let probs = floats(&d["probs"]);
        assert_eq!((probs.len(), &d["num_classes"]), (2, &json!(2)));
        assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-5, "{probs:?}");
        let best = if probs[1] > probs[0] { 1 } else { 0 };
        assert_eq!(d["label"], format!("LABEL_{best}"), "the likeliest label, named as transformers does");
    }
    assert_eq!(
        (&body["usage"]["prompt_tokens"], &body["usage"]["completion_tokens"]),
        (&json!(2), &json!(0))
    );
    let (_, again) = sim.post("/v1/classify", json!({"input": "good"})).await;
    assert_eq!(again["data"][0]["probs"], data[0]["probs"], "deterministic in the input");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rerank_orders_cuts_and_echoes_as_asked() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let documents = json!(["alpha", "beta", "gamma", "delta"]);
    let (status, all) = sim.post("/v1/rerank", json!({"query": "which?", "documents": documents})).await;
    assert_eq!(status, 200, "{all}");
    let all = all.as_array().unwrap().clone();
    assert_eq!(all.len(), 4);
    let scores: Vec<f64> = all.iter().map(|r| r["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)));
    let mut indices: Vec<u64> = all.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    for r in &all {
        assert_eq!(r["document"], documents[r["index"].as_u64().unwrap() as usize]);
        assert!(r["meta_info"].is_null(), "a generation model scores by logprobs: {r}");
    }
    indices.sort_unstable();
    assert_eq!(indices, [0, 1, 2, 3]);

    let (_, top) =
        sim.post("/v1/rerank", json!({"query": "which?", "documents": documents, "top_n": 2})).await;
    assert_eq!(top.as_array().unwrap()[..], all[..2], "top_n keeps the best, scores deterministic");
    let (status, bare) = harness::put(
        sim.http,
        "/v1/rerank",
        json!({"query": "which?", "documents": documents, "return_documents": false}),
    )
    .await;
    assert_eq!(status, 200);
    let bare: Value = serde_json::from_slice(&bare).unwrap();
    assert!(bare.as_array().unwrap().iter().all(|r| r.get("document").is_none()), "{bare}");
    assert_eq!(bare[0]["score"], all[0]["score"]);

    let (status, body) = sim.post("/v1/rerank", json!({"query": "q", "documents": []})).await;
    assert_eq!((status.as_u16(), &body["message"]), (400, &json!("Documents cannot be empty")));
    let (status, body) = sim.post("/v1/rerank", json!({"query": "q", "documents": ["a"], "top_n": 0})).await;
    assert_eq!((status.as_u16(), &body["type"]), (400, &json!("Bad Request")));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cross_encoder_rerank_reports_meta_info() {
    let sim = Sim::start(&["--is-embedding", "--sim-speedup", "100"]).await;
    let (status, body) = sim.post("/v1/rerank", json!({"query": "q", "documents": ["a", "b"]})).await;
    assert_eq!(status, 200, "{body}");
    for r in body.as_array().unwrap() {
        let meta = &r["meta_info"];
        assert_eq!(meta["finish_reason"], json!({"type": "length", "length": 0}), "{r}");
        assert!(meta["prompt_tokens"].as_u64().unwrap() > 0 && meta["e2e_latency"].is_f64());
    }
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pooling_inputs_run_in_the_engine_under_their_rids() {
    let sim = Sim::start(&["--is-embedding", "--sim-speedup", "100"]).await;
    let (status, _) = sim.post("/v1/embeddings", json!({"input": "abc", "rid": "emb-1"})).await;
    assert_eq!(status, 200);
    let (status, _) =
        sim.post("/v1/classify", json!({"input": ["ab", "cd"], "rid": ["cls-a", "cls-b"]})).await;
    assert_eq!(status, 200);
    // The engine's task records the end just after the answer left.
    harness::eventually("all three ended", || async {
        let log = sim.requests().await;
        log.len() == 3 && log.iter().all(|e| e["outcome"] != "running")
    })
    .await;
    let log = sim.requests().await;
    let rids: Vec<&str> = log.iter().map(|e| e["rid"].as_str().unwrap()).collect();
    assert_eq!(rids, ["emb-1", "cls-a", "cls-b"]);
    assert_eq!(log[0]["path"], "/v1/embeddings");
    assert_eq!(log[1]["path"], "/v1/classify");
    for e in &log {
        assert_eq!(
            (&e["outcome"], &e["completion_tokens"], &e["prompt_tokens"]),
            (&json!("ok"), &json!(0), &json!(1)),
            "{e}"
        );
        assert!(e["engine_ms"].as_f64().is_some());
    }
    let (status, body) = sim.post("/v1/embeddings", json!({"input": ["a", "b"], "rid": "one"})).await;
    assert_eq!(
        (status.as_u16(), &body["message"]),
        (500, &json!("Internal server error: The rid should be a list."))
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_embedding_holds_a_slot_while_it_prefills() {
    // 32 KiB of text is 8,192 tokens: one prefill chunk of about 0.6 s of model time.
    let sim = Sim::start(&["--is-embedding"]).await;
    let http = sim.http;
    let request = tokio::spawn(async move {
        harness::post(http, "/v1/embeddings", json!({"input": "y".repeat(32 << 10)})).await
    });
    harness::eventually("the embedding in the engine", || async {
        sim.load_sum("num_running_reqs").await + sim.load_sum("num_waiting_reqs").await == 1
    })
    .await;
    let (status, _) = request.await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert_eq!(sim.load_sum("num_running_reqs").await + sim.load_sum("num_waiting_reqs").await, 0);
    assert_eq!(sim.requests().await[0]["prompt_tokens"], 8192);
    sim.stop().await;
}

//! `/v1/tokenize` and `/v1/detokenize` (and their aliases) in SGLang 0.5.23's shapes: the
//! tokens a generation request would prefill, with the sim's tokens and with a real tokenizer.

use serde_json::{Value, json};

use crate::harness::Sim;

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

/// `/v1/tokenize` of `prompt` and of `messages` agree with what `/v1/completions` and
/// `/v1/chat/completions` report as `usage.prompt_tokens`.
async fn agrees_with_generation(sim: &Sim) {
    let prompt = "once upon a time, in a land far away";
    let (status, t) = sim.post("/v1/tokenize", json!({"prompt": prompt})).await;
    assert_eq!(status, 200, "{t}");
    let tokens = ids(&t["tokens"]);
    assert!(!tokens.is_empty());
    assert_eq!(t["count"], tokens.len());
    let (_, completion) = sim.post("/v1/completions", json!({"prompt": prompt, "max_tokens": 1})).await;
    assert_eq!(completion["usage"]["prompt_tokens"], tokens.len(), "{completion}");
    let (_, alias) = sim.post("/tokenize", json!({"prompt": prompt})).await;
    assert_eq!(alias, t);

    let messages =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]);
    let (status, chat_tokens) = sim.post("/v1/tokenize", json!({"messages": messages})).await;
    assert_eq!(status, 200, "{chat_tokens}");
    let count = chat_tokens["count"].as_u64().unwrap();
    assert_eq!(ids(&chat_tokens["tokens"]).len() as u64, count);
    let (_, chat) = sim.post("/v1/chat/completions", json!({"messages": messages, "max_tokens": 1})).await;
    assert_eq!(chat["usage"]["prompt_tokens"], count, "{chat}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tokenize_counts_what_generation_prefills() {
    let sim = Sim::start(&["--sim-speedup", "100", "--context-length", "4096"]).await;
    agrees_with_generation(&sim).await;
    let (_, t) = sim.post("/v1/tokenize", json!({"prompt": "abcd"})).await;
    assert_eq!(t["max_model_len"], 4096);
    let (status, many) = sim.post("/v1/tokenize", json!({"prompt": ["ab", "abcdefghi"]})).await;
    assert_eq!(status, 200);
    assert_eq!(many["count"], json!([1, 3]));
    assert_eq!(many["tokens"].as_array().unwrap().len(), 2);
    for body in [json!({}), json!({"prompt": "a", "messages": [{"role": "user", "content": "b"}]})] {
        let (status, refused) = sim.post("/v1/tokenize", body).await;
        assert_eq!((status.as_u16(), &refused["type"]), (400, &json!("Bad Request")), "{refused}");
    }
    let (status, empty) = sim.post("/v1/tokenize", json!({"messages": []})).await;
    assert_eq!((status.as_u16(), &empty["message"]), (400, &json!("Messages cannot be empty.")));
    assert!(sim.requests().await.iter().all(|e| e["path"] != "/v1/tokenize"), "no engine request");
    assert_eq!(sim.get("/v1/tokenize").await.0, 405);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn detokenize_reads_ids_back() {
    let sim = Sim::start(&[]).await;
    let (status, one) = sim.post("/v1/detokenize", json!({"tokens": [0, 1, 33]})).await;
    assert_eq!(status, 200);
    assert_eq!(one, json!({"text": "the of of"}), "id t reads as the sim's word t % 32");
    let (_, many) = sim.post("/detokenize", json!({"tokens": [[0], [1, 2]]})).await;
    assert_eq!(many, json!({"text": ["the", "of and"]}));
    let (_, none) = sim.post("/v1/detokenize", json!({"tokens": []})).await;
    assert_eq!(none, json!({"text": ""}));
    let (status, refused) = sim.post("/v1/detokenize", json!({"tokens": "abc"})).await;
    assert_eq!((status.as_u16(), &refused["type"]), (400, &json!("Bad Request")));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_real_tokenizer_tokens_are_the_tokenizers() {
    let dir = tempfile::tempdir().unwrap();
    infera_tokenize::fixture::write_model_dir(dir.path(), 300).unwrap();
    let path = dir.path().to_str().unwrap().to_owned();
    let sim = Sim::start(&["--sim-speedup", "100", "--tokenizer-path", &path]).await;
    agrees_with_generation(&sim).await;
    let text = "a land far away";
    let (_, t) = sim.post("/v1/tokenize", json!({"prompt": text})).await;
    let (_, back) = sim.post("/v1/detokenize", json!({"tokens": t["tokens"]})).await;
    assert_eq!(back["text"], text, "the tokenizer's decode");
    sim.stop().await;
}

//! Tokenizers per model: one proxy serves two models whose tokenizers count the same prompt
//! apart, one given on the command line (`--model-tokenizer`), the other found where its worker's
//! `/model_info` says. Each model's requests are booked with that model's exact token count,
//! each model's workers are probed for render parity with its own tokenizer, and a LoRA
//! adapter's request (`base:adapter`) is picked among its base model's workers and counted with
//! the base model's tokenizer.

use std::path::Path;

use futures_util::StreamExt;
use http::StatusCode;
use infera_proto::pb;
use infera_proto::types::Api;
use infera_testkit::SimSpec;
use infera_tokenize::{Outcome, Tokenizer};
use serde_json::{Value, json};

use crate::harness::{self, *};

/// The chat request every model is asked, naming `model`.
fn chat(model: &str) -> Value {
    let text = "Tokenizers differ: the same words are more or fewer tokens in another vocabulary.";
    json!({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 2})
}

/// How many tokens the tokenizer in `dir` makes of [`chat`], rendered as SGLang renders it.
fn exact_tokens(dir: &Path) -> u64 {
    let tokenizer = Tokenizer::load(&dir.join("tokenizer.json"), None).unwrap();
    match tokenizer.tokenize(Api::ChatCompletions, chat("any").as_object().unwrap(), None).unwrap() {
        Outcome::Tokens(t) => t.ids.len() as u64,
        other => panic!("{other:?}"),
    }
}

/// The next decision control makes for the request `id`.
async fn decision_for(decisions: &mut tonic::Streaming<pb::DecisionEvent>, id: &str) -> pb::DecisionEvent {
    loop {
        let e = decisions.next().await.expect("decision stream open").expect("a decision");
        if e.request_id == id {
            return e;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_model_is_counted_with_its_own_tokenizer_and_an_adapter_with_its_base_models() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    infera_tokenize::fixture::write_model_dir(dir_a.path(), 300).unwrap();
    infera_tokenize::fixture::write_model_dir(dir_b.path(), 2_000).unwrap();
    let (a_tokens, b_tokens) = (exact_tokens(dir_a.path()), exact_tokens(dir_b.path()));
    assert_ne!(a_tokens, b_tokens, "the two tokenizers must count the prompt apart");

    // Each sim tokenizes with its model's files; model b's /model_info names its directory.
    let tokenizer_path = |dir: &Path| ["--tokenizer-path".to_owned(), dir.to_str().unwrap().to_owned()];
    let a = harness::sim(SimSpec::mixed("a-0", "a", 1)).extra(tokenizer_path(dir_a.path()));
    let b = harness::sim(SimSpec::mixed("b-0", "b", 1)).extra(tokenizer_path(dir_b.path()));
    let (a, b) = (a.start().await.unwrap(), b.start().await.unwrap());
    let control = start_control(vec![a.record.clone(), b.record.clone()], &[]).await;
    let model_a = format!("a={}", dir_a.path().display());
    let proxy = start_proxy(control.addr, &["--model-tokenizer", &model_a]).await;
    proxy.wait_ready("a").await.unwrap();
    proxy.wait_ready("b").await.unwrap();

    // Each model's worker renders as the proxy does with that model's tokenizer (model a's would
    // count model b's probe conversations apart): b's found, a's from the flag.
    for series in
        [r#"infera_render_parity{worker="a-0",model="a"}"#, r#"infera_render_parity{worker="b-0",model="b"}"#]
    {
        assert_eq!(value_of(&proxy.url, series).await, 1.0, "{series}");
    }

    let mut decisions = control
        .admin()
        .await
        .watch_decisions(pb::WatchDecisionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let url = format!("{}/v1/chat/completions", proxy.url);
    for (id, model, base, worker, tokens) in [
        ("req-a", "a", "a", "a-0", a_tokens),
        ("req-b", "b", "b", "b-0", b_tokens),
        ("req-b-adapter", "b:sql-expert", "b", "b-0", b_tokens),
    ] {
        let (status, text) = post_json(&url, &chat(model), &[("x-request-id", id)]).await;
        assert_eq!(status, StatusCode::OK, "{model}: {text}");
        // The body went on whole: the engine applies the adapter the model names.
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(answer["model"], model, "{text}");
        let e = decision_for(&mut decisions, id).await;
        assert_eq!(e.model, base, "{id} picked for its base model");
        assert_eq!(e.chosen.as_ref().map(|t| t.worker_id.as_str()), Some(worker), "{id}: {e:?}");
        assert_eq!(e.request_tokens, tokens, "{id} booked with its model's exact count");
    }
    // The engine counted each prompt as the proxy did.
    for (sim, ids, tokens) in
        [(&a, &["req-a"][..], a_tokens), (&b, &["req-b", "req-b-adapter"][..], b_tokens)]
    {
        let log = sim.requests().await;
        for id in ids {
            let entry = log
                .iter()
                .find(|r| r["rid"] == *id)
                .unwrap_or_else(|| panic!("{id} not on its worker: {log:?}"));
            assert_eq!(entry["prompt_tokens"], tokens, "{entry}");
        }
    }

    assert_eq!(value_of(&proxy.url, r#"infera_proxy_tokenize_total{outcome="ok",model="a"}"#).await, 1.0);
    assert_eq!(value_of(&proxy.url, r#"infera_proxy_tokenize_total{outcome="ok",model="b"}"#).await, 2.0);
}

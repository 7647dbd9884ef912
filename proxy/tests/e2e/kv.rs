//! KV-aware prefill end to end: the proxy tokenizes with the model's tokenizer and chat template,
//! sends the prompt's page hashes with PickPrefill; the prefill sims tokenize the same way and
//! publish what their prefix caches store over ZMQ; control follows those events. A conversation's
//! next turn goes to the prefill that holds its prefix, and that prefill reports the hit. The
//! same turn under a `cache_salt` is a namespace of its own, in the sims as in SGLang: it is
//! credited nothing until its own pages are stored.

use std::time::{Duration, Instant};

use infera_proto::pb::{self, admin_client::AdminClient};
use serde_json::{Value, json};

use infera_testkit::SimSpec;

use crate::harness::{self, *};

const PAGE: u32 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_turn_of_a_conversation_goes_to_the_prefill_that_holds_its_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = infera_tokenize::fixture::write_model_dir(dir.path(), 2_000).unwrap();
    let model_dir = dir.path().to_str().unwrap();
    let common = ["--tokenizer-path", model_dir, "--enable-cache-report"];
    let sim = |spec: SimSpec| harness::sim(spec).page_size(PAGE).extra(common);
    let prefills = [
        sim(SimSpec::prefill("prefill-0", MODEL).kv_events("kv")).start().await.unwrap(),
        sim(SimSpec::prefill("prefill-1", MODEL).kv_events("kv")).start().await.unwrap(),
    ];
    let decode = sim(SimSpec::decode("decode-0", MODEL, 2)).start().await.unwrap();
    let workers = vec![prefills[0].record.clone(), prefills[1].record.clone(), decode.record.clone()];
    let control = start_control(workers, &["--decode-input-demand", "on"]).await;
    let control_addr = control.addr;
    let proxy_node = start_proxy(control_addr, &["--tokenizer", tokenizer.to_str().unwrap()]).await;
    wait_ready(&proxy_node).await;
    let proxy = proxy_node.url.clone();

    let mut admin = AdminClient::connect(format!("http://{control_addr}")).await.unwrap();
    let req = pb::WatchDecisionsRequest { kind: pb::PickKind::Prefill as i32, model: MODEL.into() };
    let mut decisions = admin.watch_decisions(req).await.unwrap().into_inner();
    let url = format!("{proxy}/v1/chat/completions");
    let ask = |messages: Value| json!({"model": MODEL, "messages": messages, "max_tokens": 4});

    // Turn 1: about 1,500 tokens, no session key; no prefill holds anything of it yet.
    let mut messages = infera_tokenize::fixture::conversation(3, 1, 400, true);
    let (status, body) = post_json(&url, &ask(json!(messages)), &[]).await;
    assert_eq!(status, 200, "{body}");
    let first = decisions.message().await.unwrap().unwrap();
    assert!(first.candidates.iter().all(|c| c.overlap_pages == 0), "{first:?}");
    let home = first.chosen.clone().unwrap().worker_id;

    // Turn 2 extends it. Once the prefill's events have reached control, the pick credits the
    // shared pages on `home` only, and `home` reports them as cached.
    messages.push(json!({"role": "assistant", "content": "the of and to"}));
    messages.push(json!({"role": "user", "content": "and one more question about the pages"}));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = post_json(&url, &ask(json!(messages)), &[]).await;
        assert_eq!(status, 200, "{body}");
        let d = decisions.message().await.unwrap().unwrap();
        let at = |w: &str| d.candidates.iter().find(|c| c.target.as_ref().unwrap().worker_id == w).unwrap();
        if at(&home).overlap_pages > 0 {
            assert_eq!(d.chosen.unwrap().worker_id, home);
            let other = if home == "prefill-0" { "prefill-1" } else { "prefill-0" };
            assert_eq!(at(other).overlap_pages, 0);
            assert!(at(&home).cached_tokens >= 1_000, "most of turn 1 is shared: {:?}", at(&home));
            let usage: Value = serde_json::from_str(&body).unwrap();
            let cached = usage.pointer("/usage/prompt_tokens_details/cached_tokens").and_then(Value::as_u64);
            assert!(cached.is_some_and(|c| c >= 1_000), "the prefill reports the hit: {usage}");
            break;
        }
        assert!(Instant::now() < deadline, "control never saw turn 1's pages: {d:?}");
    }

    // The same turn under a salt: `home` holds its tokens, but not in the salt's namespace.
    let mut salted = ask(json!(messages));
    salted["cache_salt"] = json!("tenant-a");
    let (status, body) = post_json(&url, &salted, &[]).await;
    assert_eq!(status, 200, "{body}");
    let d = decisions.message().await.unwrap().unwrap();
    assert!(d.candidates.iter().all(|c| c.overlap_pages == 0), "a salt shares no pages: {d:?}");
    let usage: Value = serde_json::from_str(&body).unwrap();
    let cached = usage.pointer("/usage/prompt_tokens_details/cached_tokens").and_then(Value::as_u64);
    assert_eq!(cached.unwrap_or(0), 0, "nor does the sim's cache: {usage}");
    let salted_home = d.chosen.unwrap().worker_id;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = post_json(&url, &salted, &[]).await;
        assert_eq!(status, 200, "{body}");
        let d = decisions.message().await.unwrap().unwrap();
        let at = |w: &str| d.candidates.iter().find(|c| c.target.as_ref().unwrap().worker_id == w).unwrap();
        if at(&salted_home).overlap_pages > 0 {
            assert_eq!(d.chosen.unwrap().worker_id, salted_home);
            let usage: Value = serde_json::from_str(&body).unwrap();
            let cached = usage.pointer("/usage/prompt_tokens_details/cached_tokens").and_then(Value::as_u64);
            assert!(cached.is_some_and(|c| c >= 1_000), "the salted pages are a hit now: {usage}");
            break;
        }
        assert!(Instant::now() < deadline, "control never saw the salted pages: {d:?}");
    }
}

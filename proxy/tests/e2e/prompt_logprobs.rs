//! Prompt logprobs through PD: the prefill computes them, the decode's answer lacks them, and the
//! proxy puts the prefill's in front of the decode's, whole and streamed, as an
//! aggregated worker would answer (`proxy/src/prompt_logprobs.rs`).

use http::StatusCode;
use serde_json::{Value, json};

use crate::harness::*;

fn generate(input_ids: Value, stream: bool, start: Option<u32>) -> Value {
    let mut body = json!({"model": MODEL, "input_ids": input_ids, "sampling_params": {"max_new_tokens": 3},
        "return_logprob": true, "stream": stream});
    if let Some(start) = start {
        body["logprob_start_len"] = json!(start);
    }
    body
}

/// The prompt ids `input_token_logprobs` names, and whether the first entry's logprob is null.
fn prompt_ids(answer: &Value) -> (Vec<u64>, bool) {
    let lists = answer["meta_info"]["input_token_logprobs"].as_array().unwrap_or_else(|| panic!("{answer}"));
    let ids = lists.iter().map(|e| e[1].as_u64().unwrap()).collect();
    (ids, lists.first().is_some_and(|e| e[0].is_null()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefills_prompt_logprobs_reach_the_answer_whole_and_streamed() {
    let cluster = Cluster::start(Shape::default()).await;
    let url = format!("{}/generate", cluster.proxies[0]);
    let prompt: Vec<u64> = (101..121).collect();

    let (status, text) = post_json(&url, &generate(json!(prompt), false, Some(0)), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(prompt_ids(&v), (prompt.clone(), true), "every prompt position, from the prefill: {v}");
    assert_eq!(v["meta_info"]["output_token_logprobs"].as_array().map(Vec::len), Some(3), "{v}");

    // From position 5: the prefill's 15, in every event of the stream.
    let (status, text) = post_json(&url, &generate(json!(prompt), true, Some(5)), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let events = sse_events(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{text}");
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(prompt_ids(&v).0, prompt[5..], "{e}");
    }

    // (The sim serves no batches; a batch's items are merged one by one against real SGLang in
    // testkit/tests/sglang_pd/logprobs.rs.)

    // Without `logprob_start_len` no prompt logprobs are asked for, and none appear.
    let (status, text) = post_json(&url, &generate(json!(prompt), false, None), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["meta_info"]["input_token_logprobs"], json!([]), "{v}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

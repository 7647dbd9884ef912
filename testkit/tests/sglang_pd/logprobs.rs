//! Prompt logprobs through a real PD pair: SGLang's prefill computes them and its decode answers
//! without them; the proxy's answer carries every prompt position asked for, whole, streamed and
//! per batch item (`proxy/src/prompt_logprobs.rs`).

use infera_testkit::{http, sse};
use serde_json::{Value, json};

use super::sglang::{cluster_over, run};
use super::{MODEL, world};

/// `meta_info.input_token_logprobs`' length, and whether its first logprob is null.
fn prompt_logprobs(answer: &Value) -> (usize, bool) {
    let lists = answer["meta_info"]["input_token_logprobs"].as_array().unwrap_or_else(|| panic!("{answer}"));
    (lists.len(), lists.first().is_some_and(|e| e[0].is_null()))
}

fn prompt_tokens(answer: &Value) -> usize {
    answer["meta_info"]["prompt_tokens"].as_u64().unwrap_or_else(|| panic!("{answer}")) as usize
}

#[test]
fn the_prefills_prompt_logprobs_reach_the_answer_whole_streamed_and_per_item() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, w.pd_records()).await;
        let url = format!("{}/generate", cluster.proxies[0].url);
        let body = |text: Value, stream: bool, start: u32| {
            json!({"model": MODEL, "text": text, "sampling_params": {"max_new_tokens": 4, "temperature": 0},
                "return_logprob": true, "logprob_start_len": start, "stream": stream})
        };
        let (status, text) =
            http::post_json(&url, &body(json!("The capital of France is"), false, 0)).await.unwrap();
        assert!(status.is_success(), "{status} {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(prompt_logprobs(&v), (prompt_tokens(&v), true), "every prompt position: {v}");

        let (status, text) =
            http::post_json(&url, &body(json!("The capital of France is"), true, 2)).await.unwrap();
        assert!(status.is_success(), "{status} {text}");
        let events: Vec<Value> = sse::data(&text)
            .into_iter()
            .filter(|d| d != "[DONE]")
            .map(|d| serde_json::from_str(&d).unwrap())
            .collect();
        assert!(!events.is_empty(), "{text}");
        for e in &events {
            assert_eq!(prompt_logprobs(e).0, prompt_tokens(e) - 2, "from position 2, in every event: {e}");
        }

        let (status, text) =
            http::post_json(&url, &body(json!(["One two three", "Four"]), false, 0)).await.unwrap();
        assert!(status.is_success(), "{status} {text}");
        let items: Value = serde_json::from_str(&text).unwrap();
        let items = items.as_array().unwrap_or_else(|| panic!("{text}"));
        assert_eq!(items.len(), 2);
        for item in items {
            assert_eq!(prompt_logprobs(item).0, prompt_tokens(item), "each item its own prompt: {item}");
        }
        w.all_idle().await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

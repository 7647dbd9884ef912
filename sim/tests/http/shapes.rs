//! Stream and non-stream shapes of the four data-plane routes, as SGLang 0.5.23 writes them
//! (`manual/reference/sim.md` lists them).

use serde_json::{Value, json};

use crate::harness::{Events, Next, Sim, data_of};

#[tokio::test(flavor = "multi_thread")]
async fn generate_streams_cumulative_text_and_ends_with_done() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let body = json!({"text": "hello world", "sampling_params": {"max_new_tokens": 8}, "stream": true});
    let mut events = Events::open(sim.http, "/generate", body).await;
    assert_eq!(events.status, 200);
    assert_eq!(events.content_type, "text/event-stream");
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    assert_eq!(all.last().map(String::as_str), Some("data: [DONE]"));
    let data: Vec<Value> = all[..all.len() - 1].iter().map(|e| data_of(e).unwrap()).collect();
    let mut previous = String::new();
    for (i, d) in data.iter().enumerate() {
        let text = d["text"].as_str().unwrap();
        assert!(text.starts_with(&previous), "cumulative: {previous:?} then {text:?}");
        previous = text.to_owned();
        let meta = &d["meta_info"];
        for key in ["id", "prompt_tokens", "completion_tokens", "cached_tokens", "dp_rank", "weight_version"]
        {
            assert!(meta.get(key).is_some(), "meta_info.{key} missing in {d}");
        }
        assert_eq!(
            d["output_ids"].as_array().unwrap().len() as u64,
            meta["completion_tokens"].as_u64().unwrap()
        );
        let last = i == data.len() - 1;
        assert_eq!(meta["finish_reason"].is_null(), !last, "{d}");
        assert_eq!(meta.get("e2e_latency").is_some(), last);
    }
    let last = &data[data.len() - 1]["meta_info"];
    assert_eq!(last["finish_reason"], json!({"type": "length", "length": 8}));
    assert_eq!(last["completion_tokens"], 8);
    assert_eq!(last["prompt_tokens"], 3);
    assert_eq!(previous.split(' ').count(), 8);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn generate_whole_body_is_deterministic_per_rid() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5}, "rid": "r1"});
    let (status, a) = sim.post("/generate", body.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(a["meta_info"]["id"], "r1");
    assert_eq!(a["meta_info"]["finish_reason"]["type"], "length");
    assert_eq!(a["meta_info"]["completion_tokens"], 5);
    let (_, b) = sim.post("/generate", body).await;
    assert_eq!(a["text"], b["text"]);
    assert_eq!(b["meta_info"]["cached_tokens"], 2, "the second run hits the prefix cache");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_streams_role_content_finish_usage_done() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 6,
                      "stream": true, "stream_options": {"include_usage": true}});
    let mut events = Events::open(sim.http, "/v1/chat/completions", body).await;
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    assert_eq!(all.last().map(String::as_str), Some("data: [DONE]"));
    let chunks: Vec<Value> = all[..all.len() - 1].iter().map(|e| data_of(e).unwrap()).collect();
    let role = &chunks[0];
    assert_eq!(role["object"], "chat.completion.chunk");
    assert_eq!(
        role["choices"][0]["delta"],
        json!({"reasoning_content": null, "role": "assistant", "content": ""})
    );
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    assert_eq!(usage["usage"]["total_tokens"], usage["usage"]["prompt_tokens"].as_u64().unwrap() + 6);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    assert_eq!(finish["choices"][0]["delta"], json!({"reasoning_content": null}));
    let content: String = chunks[1..chunks.len() - 2]
        .iter()
        .map(|c| {
            assert!(c["choices"][0]["finish_reason"].is_null());
            c["choices"][0]["delta"]["content"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(content.split(' ').count(), 6);
    let id = &role["id"];
    assert!(chunks.iter().all(|c| c["id"] == *id && c["model"] == "m"));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_whole_body_and_no_usage_chunk_by_default() {
    let sim = Sim::start(&["--sim-speedup", "100", "--served-model-name", "served"]).await;
    let messages = json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]);
    let (status, body) =
        sim.post("/v1/chat/completions", json!({"messages": messages, "max_completion_tokens": 3})).await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "served");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 3);
    assert!(body.get("metadata").is_some());
    let mut events =
        Events::open(sim.http, "/v1/chat/completions", json!({"messages": messages, "stream": true})).await;
    let (all, _) = events.rest().await;
    assert!(all.iter().filter_map(|e| data_of(e)).all(|c| c["choices"] != json!([])), "no usage chunk");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn completions_stream_and_whole() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let body = json!({"prompt": "once upon a time", "max_tokens": 4, "stream": true,
                      "stream_options": {"include_usage": true}});
    let mut events = Events::open(sim.http, "/v1/completions", body).await;
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    assert_eq!(all.last().map(String::as_str), Some("data: [DONE]"));
    let chunks: Vec<Value> = all[..all.len() - 1].iter().map(|e| data_of(e).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    assert_eq!(chunks[chunks.len() - 1]["choices"], json!([]));
    assert_eq!(chunks[chunks.len() - 1]["usage"]["completion_tokens"], 4);
    assert_eq!(chunks[chunks.len() - 2]["choices"][0]["finish_reason"], "length");
    assert!(chunks[0]["usage"].is_null());
    let (status, whole) =
        sim.post("/v1/completions", json!({"prompt": "once upon a time", "max_tokens": 4})).await;
    assert_eq!(status, 200);
    assert_eq!(whole["choices"][0]["text"].as_str().unwrap().split(' ').count(), 4);
    assert_eq!(whole["usage"]["prompt_tokens"], 4);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn responses_whole_and_streamed() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let (status, body) = sim.post("/v1/responses", json!({"input": "hello", "max_output_tokens": 3})).await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(body["output"][0]["content"][0]["text"].as_str().unwrap().split(' ').count(), 3);
    assert_eq!(body["usage"]["output_tokens"], 3);
    let input = json!([{"role": "user", "content": "hello"}]);
    let mut events = Events::open(sim.http, "/v1/responses", json!({"input": input, "stream": true})).await;
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    assert!(all[0].starts_with("event: response.created\n"), "{:?}", all[0]);
    assert!(all.iter().any(|e| e.starts_with("event: response.output_text.delta\n")));
    assert!(all[all.len() - 2].starts_with("event: response.completed\n"));
    assert_eq!(all.last().map(String::as_str), Some("data: [DONE]"));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_bodies_get_each_routes_error_shape() {
    let sim = Sim::start(&[]).await;
    let (status, body) = sim.post("/generate", json!({"sampling_params": {}})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("text or input_ids"), "{body}");
    for path in ["/v1/chat/completions", "/v1/completions", "/v1/responses"] {
        let (status, body) = sim.post(path, json!({"max_tokens": "many"})).await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(body["object"], "error");
        assert_eq!(body["type"], "BadRequestError");
        assert_eq!(body["code"], 400);
        assert!(body["param"].is_null());
    }
    let (status, body) = sim.post("/generate", json!({"text": ["a", "b"]})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("batched"));
    sim.stop().await;
}

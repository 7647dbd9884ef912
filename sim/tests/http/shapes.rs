//! Stream and non-stream shapes of the four data-plane routes, as SGLang 0.5.23 writes them
//! (`manual/reference/sim.md` lists them).

use serde_json::{Value, json};

use crate::harness::{self, Events, Next, Sim, data_of};

#[tokio::test(flavor = "multi_thread")]
async fn generate_streams_cumulative_text_and_ends_with_done() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let body = json!({"text": "hello world", "sampling_params": {"max_new_tokens": 8}, "stream": true});
    let mut events = Events::open(sim.http, "/generate", body).await;
    assert_eq!(events.status, 200);
    assert_eq!(events.content_type, "text/event-stream; charset=utf-8", "as SGLang sends it");
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
    // It ran to max_output_tokens: SGLang says incomplete.
    assert_eq!(body["status"], "incomplete");
    assert_eq!(body["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(body["max_output_tokens"], 3);
    assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(body["output"][0]["content"][0]["text"].as_str().unwrap().split(' ').count(), 3);
    assert_eq!(body["usage"]["output_tokens"], 3);
    let input = json!([{"role": "user", "content": "hello"}]);
    let mut events = Events::open(sim.http, "/v1/responses", json!({"input": input, "stream": true})).await;
    let (all, end) = events.rest().await;
    assert_eq!(end, Next::End);
    let names: Vec<&str> = all.iter().filter_map(|e| e.lines().next()?.strip_prefix("event: ")).collect();
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", names.len() - 8));
    expected.extend(["response.output_text.done", "response.content_part.done", "response.output_item.done"]);
    expected.push("response.completed");
    assert_eq!(names, expected);
    // Every event is numbered, and no [DONE] follows them (SGLang's Responses stream).
    let numbers: Vec<u64> =
        all.iter().map(|e| data_of(e).unwrap()["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (0..all.len() as u64).collect::<Vec<_>>());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_bodies_get_each_routes_error_shape() {
    let sim = Sim::start(&[]).await;
    let (status, body) = sim.post("/generate", json!({"sampling_params": {}})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("text, input_ids or input_embeds"), "{body}");
    // A body FastAPI cannot validate: SGLang's validation envelope, nested on /v1/responses.
    for path in ["/v1/chat/completions", "/v1/completions"] {
        let (status, body) = sim.post(path, json!({"max_tokens": 4})).await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(body["object"], "error");
        assert_eq!(body["type"], "Bad Request");
        assert_eq!(body["code"], 400);
        assert!(body["param"].is_null());
    }
    let (status, body) = sim.post("/v1/responses", json!({})).await;
    assert_eq!((status.as_u16(), &body["error"]["type"]), (400, &json!("Bad Request")));
    // A parameter SGLang refuses after reading the body: the route's own error shape.
    let (status, body) = sim.post("/v1/chat/completions", json!({"messages": [], "temperature": -1})).await;
    assert_eq!((status.as_u16(), &body["type"]), (400, &json!("BadRequestError")));
    assert_eq!(body["message"], "temperature must be a non-negative finite number, got -1.0.");
    let (status, body) = sim.post("/generate", json!({"text": "x", "sampling_params": {"top_p": 0}})).await;
    assert_eq!(
        (status.as_u16(), &body["error"]["message"]),
        (400, &json!("top_p must be in (0, 1], got 0."))
    );
    let (status, body) = sim.post("/generate", json!({"text": ["a", "b"]})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("batched"));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_strings_n_and_logprobs_follow_sglang() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    // The sim's words are English; "e" ends a request within its first few.
    let stop = json!({"text": "abcd", "sampling_params": {"max_new_tokens": 32, "stop": ["e"]}});
    let (_, body) = sim.post("/generate", stop).await;
    assert_eq!(body["meta_info"]["finish_reason"], json!({"type": "stop", "matched": "e"}));
    let tokens = body["meta_info"]["completion_tokens"].as_u64().unwrap();
    assert!(tokens < 32 && body["output_ids"].as_array().unwrap().len() as u64 == tokens, "{body}");
    assert!(!body["text"].as_str().unwrap().contains('e'), "the text stops before the match: {body}");
    let chat =
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 32, "stop": "e", "n": 2});
    let (_, body) = sim.post("/v1/chat/completions", chat).await;
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(
            (c["index"].as_u64(), &c["finish_reason"], &c["matched_stop"]),
            (Some(i as u64), &json!("stop"), &json!("e"))
        );
    }
    let (prompt, completion) = (
        body["usage"]["prompt_tokens"].as_u64().unwrap(),
        body["usage"]["completion_tokens"].as_u64().unwrap(),
    );
    assert_eq!(
        body["usage"]["total_tokens"].as_u64().unwrap(),
        prompt + completion,
        "the prompt counted once"
    );
    let (_, many) = sim
        .post("/generate", json!({"text": "abcd", "sampling_params": {"max_new_tokens": 2, "n": 3}}))
        .await;
    let ids: Vec<&str> =
        many.as_array().unwrap().iter().map(|b| b["meta_info"]["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] != ids[1] && ids[1] != ids[2], "{ids:?}");
    let lp = json!({"text": "abcd", "sampling_params": {"max_new_tokens": 3}, "return_logprob": true, "top_logprobs_num": 2});
    let (_, body) = sim.post("/generate", lp).await;
    let meta = &body["meta_info"];
    assert_eq!(meta["output_token_logprobs_length"], 3);
    assert_eq!(meta["output_token_logprobs"][0][1], body["output_ids"][0]);
    assert_eq!(meta["output_top_logprobs"][2].as_array().unwrap().len(), 2);
    assert_eq!((&meta["input_token_logprobs"], &meta["dp_rank"]), (&json!([]), &Value::Null));
    assert_eq!(meta["weight_versions"], json!([{"version": "default", "start": 0, "end": 3}]));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lengths_models_and_methods_answer_as_sglang_does() {
    let sim = Sim::start(&["--context-length", "64"]).await;
    let (status, body) = sim.post("/generate", json!({"text": "x".repeat(400)})).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "The input (100 tokens) is longer than the model's context length (64 tokens)."
    );
    let (status, body) = sim.post("/v1/completions", json!({"prompt": "abcd", "max_tokens": 100})).await;
    assert_eq!((status.as_u16(), &body["type"]), (400, &json!("BadRequestError")));
    assert!(body["message"].as_str().unwrap().contains("a total of 101 tokens"), "{body}");
    let (status, card) = sim.get("/v1/models/m").await;
    assert_eq!((status.as_u16(), &card["id"], &card["max_model_len"]), (200, &json!("m"), &json!(64)));
    let (status, missing) = sim.get("/v1/models/other").await;
    assert_eq!((status.as_u16(), &missing["error"]["code"]), (404, &json!("model_not_found")));
    let (status, _) = sim.get("/generate").await;
    assert_eq!(status, 405);
    let (status, body) = sim.post("/server_info", json!({})).await;
    assert_eq!((status.as_u16(), &body["detail"]), (405, &json!("Method Not Allowed")));
    assert_eq!(sim.get("/nope").await.0, 404);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn generate_also_takes_put() {
    let sim = Sim::start(&["--sim-speedup", "100"]).await;
    let (status, body) = harness::put(sim.http, "/generate", json!({"text": "abcd"})).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["meta_info"]["completion_tokens"], 16);
    sim.stop().await;
}

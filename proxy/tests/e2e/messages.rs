//! Anthropic's `/v1/messages` through a 1P1D cluster: a message and its stream in SGLang's
//! shapes with both legs on one bootstrap room, `count_tokens` on any worker, the proxy's own
//! errors in Anthropic's envelope, the key taken from `x-api-key`, the usage in the metrics, the
//! ledger back to zero; and a PD model of SGLang 0.5.18 (whose request drops the bootstrap fields)
//! refused before any worker sees the request.

use std::time::Duration;

use http::StatusCode;
use infera_testkit::{ClusterSpec, ControlSpec, SimSpec, Workers};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness::*;

const KEY: &str = "anthropic-secret";

fn message(stream: bool) -> Value {
    json!({
        "model": MODEL,
        "max_tokens": 8,
        "system": [{"type": "text", "text": "Answer briefly."}],
        "messages": [
            {"role": "user", "content": "What is prefill?"},
            {"role": "assistant", "content": [{"type": "text", "text": "It reads the prompt."}]},
            {"role": "user", "content": [{"type": "text", "text": "And decode?"}]},
        ],
        "stream": stream,
    })
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `(event name, data)` of each event of an Anthropic stream.
fn named_events(body: &str) -> Vec<(String, Value)> {
    infera_testkit::sse::parse(body)
        .into_iter()
        .map(|e| (e.name.unwrap_or_else(|| panic!("an event without a name: {body}")), parse(&e.data)))
        .collect()
}

fn anthropic_error(text: &str) -> (String, String) {
    let v = parse(text);
    assert_eq!(v["type"], "error", "{v}");
    let error = v["error"].as_object().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(error.len(), 2, "only type and message: {v}");
    (error["type"].as_str().unwrap().to_owned(), error["message"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_go_through_a_pd_pair_in_anthropic_shapes_and_leave_the_ledger_at_zero() {
    let cluster = Cluster::start(Shape { decode_dp: 1, proxies: 0, ..Shape::default() }).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    let hex: String = Sha256::digest(KEY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(file.path(), format!("[[keys]]\nname = \"claude\"\nsha256 = \"{hex}\"\n")).unwrap();
    let keys = file.path().display().to_string();
    let proxy = spawn_proxy(cluster.control_addr, &["--api-keys", &keys]).await;
    eventually(Duration::from_secs(30), "the proxy to list the model to an Anthropic client", async || {
        let (status, text) = get_with(&format!("{}/v1/models", proxy.url), &[("x-api-key", KEY)]).await;
        (status == StatusCode::OK && text.contains(&format!("\"id\":\"{MODEL}\""))).then_some(())
    })
    .await;
    let url = format!("{}/v1/messages", proxy.url);
    let headers = [("x-api-key", KEY), ("anthropic-version", "2023-06-01"), ("x-request-id", "msg-whole")];

    let (status, text) = post_json(&url, &message(false), &headers).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let whole = parse(&text);
    assert_eq!(
        (whole["type"].as_str(), whole["role"].as_str()),
        (Some("message"), Some("assistant")),
        "{whole}"
    );
    assert!(whole["id"].as_str().is_some_and(|id| id.starts_with("msg_")), "{whole}");
    assert_eq!(whole["content"][0]["type"], "text", "{whole}");
    assert!(whole["content"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{whole}");
    assert_eq!(whole["stop_reason"], "max_tokens", "{whole}");
    assert_eq!(whole["usage"]["output_tokens"], 8, "{whole}");
    let input_tokens = whole["usage"]["input_tokens"].as_u64().unwrap();
    assert!(input_tokens > 0, "{whole}");

    // Both legs got it with the same bootstrap room, and the decode generated it.
    let leg = |log: Vec<Value>| {
        log.into_iter()
            .find(|r| r["x_request_id"] == "msg-whole")
            .unwrap_or_else(|| panic!("msg-whole not in the log"))
    };
    let (p, d) = (leg(cluster.prefill().unwrap().requests().await), leg(cluster.decode().requests().await));
    assert_eq!((p["path"].as_str(), d["path"].as_str()), (Some("/v1/messages"), Some("/v1/messages")));
    assert!(p["room"].is_u64() && p["room"] == d["room"], "one room: {p} {d}");
    assert_eq!((p["outcome"].as_str(), d["outcome"].as_str()), (Some("ok"), Some("ok")));
    assert_eq!(d["completion_tokens"], 8, "{d}");
    assert_eq!(d["authorization"], false, "the key stays with the proxy: {d}");

    let (status, text) = post_json(&url, &message(true), &headers).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(!text.contains("[DONE]"), "an Anthropic stream ends with message_stop: {text}");
    let events = named_events(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(names[1], "content_block_start", "{names:?}");
    assert_eq!(
        &names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    assert!(names[2..names.len() - 3].iter().all(|n| *n == "content_block_delta"), "{names:?}");
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "each event's data names it: {data}");
    }
    assert_eq!(events[0].1["message"]["usage"]["input_tokens"], input_tokens, "{:?}", events[0]);
    assert_eq!(events[0].1["message"]["usage"]["output_tokens"], 0);
    let text_out: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "text_delta", "{d}");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    // The sim writes a word per token.
    assert_eq!(text_out.split(' ').count(), 8, "{text_out}");
    assert_eq!(whole["content"][0]["text"].as_str().unwrap().split(' ').count(), 8, "{whole}");
    let delta = &events[events.len() - 2].1;
    assert_eq!(
        (delta["delta"]["stop_reason"].as_str(), delta["usage"]["output_tokens"].as_u64()),
        (Some("max_tokens"), Some(8))
    );

    // count_tokens: the prompt a message with the same system and turns prefills.
    let mut count = message(false);
    count.as_object_mut().unwrap().remove("max_tokens");
    let (status, text) = post_json(&format!("{url}/count_tokens"), &count, &headers).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(parse(&text), json!({"input_tokens": input_tokens}));

    // The proxy's own refusals, in Anthropic's envelope.
    let mut no_max = message(false);
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let (status, text) = post_json(&url, &no_max, &headers).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let (kind, why) = anthropic_error(&text);
    assert_eq!(kind, "invalid_request_error");
    assert!(why.contains("max_tokens"), "{why}");
    let (status, text) = post_json(&url, &message(false), &[("x-api-key", "wrong")]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    assert_eq!(anthropic_error(&text).0, "authentication_error");
    let mut unknown = message(true);
    unknown["model"] = json!("no-such-model");
    let (status, text) = post_json(&url, &unknown, &headers).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    assert_eq!(anthropic_error(&text).0, "not_found_error");
    let (status, text) = post_json(&format!("{url}/count_tokens"), &json!({"messages": []}), &headers).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(anthropic_error(&text).0, "invalid_request_error");
    // A worker's refusal too: a prompt and max_tokens over the context.
    let mut long = message(false);
    long["max_tokens"] = json!(10_000_000);
    let (status, text) = post_json(&url, &long, &headers).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(anthropic_error(&text).0, "invalid_request_error");
    // Chat completions keep OpenAI's envelope.
    let (status, text) =
        post_json(&format!("{}/v1/chat/completions", proxy.url), &json!({"model": MODEL}), &headers).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(parse(&text)["error"]["message"].is_string(), "{text}");

    // Both answers' usage counted for the model, under the messages API.
    let metrics = proxy.metrics().await.unwrap();
    let completion = format!("infera_proxy_completion_tokens_total{{model=\"{MODEL}\"}} 16");
    assert!(metrics.contains(&completion), "{completion} in {metrics}");
    let prompt = format!("infera_proxy_prompt_tokens_total{{model=\"{MODEL}\"}} {}", 2 * input_tokens);
    assert!(metrics.contains(&prompt), "{prompt} in {metrics}");
    assert!(metrics.contains("api=\"messages\""), "{metrics}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pd_model_of_sglang_0_5_18_refuses_messages_but_counts_their_tokens() {
    let old = |spec: SimSpec| {
        let mut spec = sim(spec).sim_flag("--sim-sglang-version", "0.5.18");
        spec.args.version = "0.5.18".parse().unwrap();
        spec
    };
    let sims = vec![old(SimSpec::prefill("prefill-0", MODEL)), old(SimSpec::decode("decode-0", MODEL, 1))];
    let mut spec = ClusterSpec::new(MODEL, sims);
    spec.control = ControlSpec::new(Workers::None);
    spec.proxies = 1;
    let kit = spec.start().await.expect("the cluster starts");
    let proxy = &kit.proxy_urls()[0];

    let (status, text) = post_json(&format!("{proxy}/v1/messages"), &message(false), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let (kind, why) = anthropic_error(&text);
    assert_eq!(kind, "invalid_request_error");
    assert!(why.contains("0.5.18") && why.contains("0.5.23"), "{why}");
    assert!(kit.sim("decode-0").requests().await.is_empty(), "no worker saw it");
    let (status, text) = post_json(&format!("{proxy}/v1/chat/completions"), &chat(2, false), &[]).await;
    assert_eq!(status, StatusCode::OK, "chat completions still go through the pair: {text}");
    let mut count = message(false);
    count.as_object_mut().unwrap().remove("max_tokens");
    let (status, text) = post_json(&format!("{proxy}/v1/messages/count_tokens"), &count, &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(parse(&text)["input_tokens"].as_u64().is_some_and(|n| n > 0), "{text}");
    kit.ledger_returns_to_zero().await.unwrap();
    kit.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_stream_cut_by_its_decode_ends_with_anthropic_error_and_message_stop() {
    let cluster = Cluster::start(Shape { decode_dp: 1, proxies: 1, ..Shape::default() }).await;
    let url = format!("{}/v1/messages", cluster.proxies[0]);
    cluster.decode().faults(json!({"die_after_tokens": 3})).await;
    let mut long = message(true);
    long["max_tokens"] = json!(16);
    let (status, text) = post_json(&url, &long, &[]).await;
    assert_eq!(status, StatusCode::OK, "the stream had begun: {text}");
    assert!(!text.contains("[DONE]"), "{text}");
    let events = named_events(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(&names[names.len() - 2..], ["error", "message_stop"], "{names:?}");
    let error = &events[events.len() - 2].1;
    assert_eq!(
        (error["type"].as_str(), error["error"]["type"].as_str()),
        (Some("error"), Some("api_error")),
        "{error}"
    );
    assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains("decode worker")), "{error}");
    cluster.decode().faults(json!({"die_after_tokens": null})).await;
    let (status, text) = post_json(&url, &message(true), &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(named_events(&text).last().map(|(n, _)| n.as_str()), Some("message_stop"), "{text}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

//! The PD path: every API, both legs with the same room, the ranks control chose.

use std::collections::HashMap;

use futures_util::StreamExt;
use http::StatusCode;
use http_body_util::BodyExt;
use infera_proto::pb;
use serde_json::{Value, json};

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_streams_and_answers_through_both_legs_with_the_rooms_and_ranks_control_chose() {
    let cluster = Cluster::start(Shape::default()).await;
    let mut decisions = cluster.decisions().await;

    let cases: Vec<(&str, Value)> = vec![
        ("/v1/chat/completions", chat(6, true)),
        ("/v1/chat/completions", chat(6, false)),
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": "The KV cache", "max_tokens": 5, "stream": true}),
        ),
        ("/v1/completions", json!({"model": MODEL, "prompt": "The KV cache", "max_tokens": 5})),
        ("/generate", json!({"text": "Hello", "sampling_params": {"max_new_tokens": 4}, "stream": true})),
        ("/generate", json!({"model": MODEL, "text": "Hello", "sampling_params": {"max_new_tokens": 4}})),
        ("/v1/responses", json!({"model": MODEL, "input": "Say hi", "max_output_tokens": 4})),
    ];
    let mut ids = Vec::new();
    for (i, (path, body)) in cases.iter().enumerate() {
        let proxy = &cluster.proxies[i % cluster.proxies.len()];
        let id = format!("e2e-{i}");
        let parent = traceparent(i);
        let headers = [("x-request-id", id.as_str()), ("traceparent", &parent), ("tracestate", "infera=t")];
        let resp = send(&format!("{proxy}{path}"), bytes::Bytes::from(body.to_string()), &headers).await;
        let status = resp.status();
        assert_eq!(resp.headers().get("x-request-id").map(|v| v.to_str().unwrap()), Some(id.as_str()));
        let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
        assert_eq!(status, StatusCode::OK, "{path}: {text}");
        if body["stream"] == true {
            let events = sse_events(&text);
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{path}: {text}");
            let first: Value = serde_json::from_str(&events[0]).unwrap();
            match *path {
                "/v1/chat/completions" => assert_eq!(first["object"], "chat.completion.chunk"),
                "/v1/completions" => assert_eq!(first["object"], "text_completion"),
                _ => assert!(first["meta_info"].is_object(), "{text}"),
            }
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            match *path {
                "/v1/chat/completions" => assert_eq!(v["choices"][0]["message"]["role"], "assistant"),
                "/v1/completions" => assert!(v["choices"][0]["text"].is_string()),
                "/v1/responses" => assert_eq!(v["object"], "response", "{text}"),
                _ => assert!(v["text"].is_string() && v["meta_info"].is_object(), "{text}"),
            }
        }
        ids.push(id);
    }

    // Control's decisions: request id → (prefill rank, decode rank).
    let mut chosen: HashMap<String, (Option<u32>, Option<u32>)> = HashMap::new();
    while chosen.values().filter(|(p, d)| p.is_some() && d.is_some()).count() < ids.len() {
        let e = decisions.next().await.unwrap().unwrap();
        let rank = e.chosen.as_ref().unwrap().dp_rank;
        let entry = chosen.entry(e.request_id.clone()).or_default();
        if e.kind == pb::PickKind::Prefill as i32 { entry.0 = Some(rank) } else { entry.1 = Some(rank) }
    }
    let prefill_log = cluster.prefill().unwrap().requests().await;
    let decode_log = cluster.decode().requests().await;
    for (i, id) in ids.iter().enumerate() {
        let find = |log: &[Value]| {
            log.iter()
                .find(|r| r["rid"] == id.as_str())
                .cloned()
                .unwrap_or_else(|| panic!("{id} not in {log:?}"))
        };
        let (p, d) = (find(&prefill_log), find(&decode_log));
        assert!(p["room"].is_u64(), "{p}");
        assert_eq!(p["room"], d["room"], "both legs carry the same room");
        let (_, decode_rank) = chosen[id];
        assert_eq!(d["routed_dp_rank"].as_u64(), decode_rank.map(u64::from), "{d}");
        assert_eq!(d["dp_rank_used"].as_u64(), decode_rank.map(u64::from), "{d}");
        assert_eq!(d["outcome"], "ok");
        assert_eq!(p["outcome"], "ok");
        // Both legs carried the client's request id and, the proxy having no span of its own
        // (no OTLP export), its trace context unchanged.
        for leg in [&p, &d] {
            assert_eq!(leg["x_request_id"], id.as_str(), "{leg}");
            assert_eq!(leg["traceparent"], traceparent(i).as_str(), "{leg}");
            assert_eq!(leg["tracestate"], "infera=t", "{leg}");
        }
    }
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

/// A client's W3C trace context for request `i` (its own trace id and parent span).
fn traceparent(i: usize) -> String {
    format!("00-{:032x}-{:016x}-01", 0xabc0 + i, 0x10 + i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dp_prefill_gets_the_rank_control_chose_and_a_room_that_follows_it() {
    let cluster = Cluster::start(Shape { prefill_dp: 2, ..Shape::default() }).await;
    let mut decisions = cluster.decisions().await;
    const N: usize = 6;
    for i in 0..N {
        let (status, text) = post_json(
            &format!("{}/v1/chat/completions", cluster.proxies[i % 2]),
            &chat(3, false),
            &[("x-request-id", &format!("dp-{i}"))],
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
    }
    // Control's prefill choices: request id → rank.
    let mut chosen: HashMap<String, u64> = HashMap::new();
    while chosen.len() < N {
        let e = decisions.next().await.unwrap().unwrap();
        if e.kind == pb::PickKind::Prefill as i32 {
            chosen.insert(e.request_id.clone(), e.chosen.as_ref().unwrap().dp_rank.into());
        }
    }
    let prefill_log = cluster.prefill().unwrap().requests().await;
    let decode_log = cluster.decode().requests().await;
    assert_eq!(prefill_log.len(), N, "{prefill_log:?}");
    for r in &prefill_log {
        let (room, rank) = (r["room"].as_u64().unwrap(), r["routed_dp_rank"].as_u64().unwrap());
        assert_eq!(Some(&rank), chosen.get(r["rid"].as_str().unwrap()), "the rank control chose: {r}");
        assert_eq!(r["dp_rank_used"].as_u64(), Some(rank), "{r}");
        assert_eq!(room % 2, rank, "follow_bootstrap_room: {r}");
        let d = decode_log.iter().find(|d| d["rid"] == r["rid"]).unwrap();
        assert_eq!(
            d["disagg_prefill_dp_rank"].as_u64(),
            Some(rank),
            "the decode learns the prefill rank: {d}"
        );
        assert_eq!((d["room"].as_u64(), &d["outcome"]), (Some(room), &json!("ok")), "{d}");
    }
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_models_take_one_leg_without_bootstrap_fields() {
    let cluster = Cluster::start(Shape { pd: false, ..Shape::default() }).await;
    let (status, text) = post_json(
        &format!("{}/v1/chat/completions", cluster.proxies[0]),
        &chat(4, true),
        &[("x-request-id", "agg-1")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let log = cluster.decode().requests().await;
    let r = log.iter().find(|r| r["rid"] == "agg-1").unwrap();
    assert!(r["room"].is_null(), "{r}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

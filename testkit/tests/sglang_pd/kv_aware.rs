//! SGLang's radix cache publishes what it holds (KV events), control indexes it, and a prefill
//! pick for a conversation's next turn finds the prefill that holds its beginning.

use std::collections::BTreeMap;
use std::time::Duration;

use infera_proto::pb;
use infera_testkit::{eventually, http};
use serde_json::json;

use super::sglang::{SETTLED, cluster_over, run};
use super::{MODEL, world};

/// A system prompt long enough to fill many 16-token pages.
const SYSTEM: &str = "You are a helpful assistant. Answer the question briefly. The quick brown fox jumps over \
    the lazy dog. What is the capital of France? The capital of France is Paris. Write a haiku about the \
    sea. Waves fold into foam. system user assistant tool function call arguments name content.";

#[test]
fn a_conversations_next_turn_goes_to_the_prefill_that_holds_its_beginning() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, w.pd_records()).await;
        let control = &cluster.control;
        eventually(SETTLED, "control to follow both prefills' KV events", async || {
            let m = control.metrics().await.unwrap_or_default();
            http::metric_sum(&m, "infera_kv_subscribers", "") >= 2.0
        })
        .await;
        let mut decisions = control
            .admin()
            .await
            .watch_decisions(pb::WatchDecisionsRequest {
                kind: pb::PickKind::Prefill as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let url = format!("{}/v1/chat/completions", cluster.proxies[0].url);
        let mut first_turn = BTreeMap::new();
        for (n, topic) in ["the sea", "the fox"].into_iter().enumerate() {
            let messages = json!([{"role": "system", "content": SYSTEM}, {"role": "user", "content": format!("Tell me about {topic} ({n}).")}]);
            let (status, text) =
                http::post_json(&url, &json!({"model": MODEL, "messages": messages, "max_tokens": 4}))
                    .await
                    .unwrap();
            assert!(status.is_success(), "{status} {text}");
            let event = next(&mut decisions).await;
            first_turn.insert(topic, event.chosen.clone().unwrap());
        }
        eventually(SETTLED, "the index to hold the conversations' pages", async || {
            let m = control.metrics().await.unwrap_or_default();
            http::metric_sum(&m, "infera_kv_index_blocks", "") > 0.0
        })
        .await;
        for (n, topic) in ["the sea", "the fox"].into_iter().enumerate() {
            let messages = json!([
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": format!("Tell me about {topic} ({n}).")},
                {"role": "assistant", "content": "Waves fold into foam."},
                {"role": "user", "content": "And more?"},
            ]);
            let (status, text) =
                http::post_json(&url, &json!({"model": MODEL, "messages": messages, "max_tokens": 4}))
                    .await
                    .unwrap();
            assert!(status.is_success(), "{status} {text}");
            let event = next(&mut decisions).await;
            let chosen = event.chosen.clone().unwrap();
            assert_eq!(
                chosen, first_turn[topic],
                "{topic}: the next turn went where its beginning is cached"
            );
            let terms = event.candidates.iter().find(|c| c.target.as_ref() == Some(&chosen)).unwrap();
            assert!(
                terms.overlap_pages > 0 && terms.cached_tokens >= 16,
                "{topic}: credited its cached pages: {terms:?}"
            );
        }
        w.all_idle().await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

async fn next(decisions: &mut tonic::Streaming<pb::DecisionEvent>) -> pb::DecisionEvent {
    let event = tokio::time::timeout(Duration::from_secs(10), decisions.message()).await;
    event.expect("a prefill decision").expect("the stream").expect("an event")
}

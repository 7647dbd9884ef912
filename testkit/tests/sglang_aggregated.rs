//! Real SGLang 0.5.23 aggregated workers (the tiny model on CPU) behind control and proxies:
//! the OpenAI and SGLang APIs answered as SGLang answers them, engine readings, DP ranks.

mod sglang;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use infera_proto::pb;
use infera_proto::types::RegisteredWorker;
use infera_testkit::control::{ControlSpec, Workers};
use infera_testkit::{Engine, EngineSpec, ProxySpec, eventually, http};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use sglang::{
    cluster_over, comparable, engine_idle, first_difference, hang_up_after_first_event, openai_calls, run,
    sglang_counter, stream_summary,
};

/// The binary's servers: one worker of one rank, one of two DP ranks (plain DP: attention DP
/// needs CUDA), each serving the tiny model under its own name.
struct World {
    single: Engine,
    dp: Engine,
}

const MODEL: &str = "tiny";
const DP_MODEL: &str = "tiny-dp";

async fn world() -> &'static World {
    static WORLD: OnceCell<World> = OnceCell::const_new();
    WORLD
        .get_or_init(async || {
            let single = EngineSpec::mixed("mixed-0", MODEL).kv_events("kv").load_events().metrics().start();
            let dp = EngineSpec::mixed("dp-0", DP_MODEL).dp(2).kv_events("kv").start();
            let (single, dp) = tokio::join!(single, dp);
            World { single: single.expect("start mixed-0"), dp: dp.expect("start dp-0") }
        })
        .await
}

#[test]
fn the_openai_client_gets_what_sglang_answers_through_a_proxy() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, [w.single.record.clone()]).await;
        let answers = openai_calls(&cluster.proxies[0].url, Some(&w.single.url), MODEL, &[]).await;
        for (case, pair) in answers.as_object().unwrap() {
            let same = |v: &Value| match v.as_array().or_else(|| v["events"].as_array()) {
                Some(chunks) => stream_summary(chunks),
                None => comparable(v),
            };
            let (proxy, direct) = (same(&pair["proxy"]), same(&pair["direct"]));
            assert!(
                direct.get("error").and_then(Value::as_str).is_none(),
                "{case}: SGLang itself failed: {direct}"
            );
            let diff = first_difference(&proxy, &direct, "");
            assert!(diff.is_none(), "{case}: the proxy's answer differs from SGLang's at {}", diff.unwrap());
        }
        // The features asked for are in the answers, not just equal on both sides.
        let proxied = |case: &str| answers[case]["proxy"].clone();
        assert_eq!(proxied("chat_n2")["choices"].as_array().map(Vec::len), Some(2), "n = 2");
        let top = &proxied("chat_logprobs")["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
        assert_eq!(top.as_array().map(Vec::len), Some(2), "top_logprobs = 2: {top}");
        assert!(proxied("completion_logprobs")["choices"][0]["logprobs"]["tokens"].is_array());
        let stopped = &proxied("chat_stop")["choices"][0];
        assert!(stopped["finish_reason"] == "stop" || stopped["finish_reason"] == "length", "{stopped}");
        assert!(
            !stopped["message"]["content"].as_str().unwrap_or("a").contains(['a', 'e', 'o']),
            "{stopped}"
        );
        assert_eq!(proxied("responses")["object"], "response");
        assert_eq!(proxied("generate")["meta_info"]["completion_tokens"], 8);
        assert_eq!(proxied("completion_batch")["choices"].as_array().map(Vec::len), Some(2));
        assert_eq!(proxied("generate_batch").as_array().map(Vec::len), Some(2));
        engine_idle(&w.single).await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

#[test]
fn a_client_that_hangs_up_mid_stream_ends_its_request_on_the_engine() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, [w.single.record.clone()]).await;
        let aborted = sglang_counter(&w.single, "sglang:num_aborted_requests_total").await;
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Talk for a long time."}],
            "max_tokens": 3000, "ignore_eos": true, "stream": true});
        hang_up_after_first_event(&cluster.proxies[0].url, "/v1/chat/completions", &body).await;
        engine_idle(&w.single).await;
        let what = "SGLang to count the request it aborted";
        eventually(sglang::SETTLED, what, async || {
            sglang_counter(&w.single, "sglang:num_aborted_requests_total").await == aborted + 1.0
        })
        .await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

#[test]
fn control_reads_the_engines_and_the_drift_returns_to_zero() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, [w.single.record.clone(), w.dp.record.clone()]).await;
        let url = cluster.proxies[0].url.clone();
        let calls = (0..12).map(|i| {
            let (url, model) = (url.clone(), if i % 2 == 0 { MODEL } else { DP_MODEL });
            async move {
                let body = json!({"model": model, "prompt": "The quick brown fox", "max_tokens": 32, "ignore_eos": true});
                http::post_json(&format!("{url}/v1/completions"), &body).await.unwrap()
            }
        });
        for (status, body) in futures_util::future::join_all(calls).await {
            assert!(status.is_success(), "{status} {body}");
        }
        let targets =
            eventually(sglang::SETTLED, "an engine reading of every rank, with no drift", async || {
                let targets = cluster.control.targets().await;
                let settled = targets.len() == 3
                    && targets
                        .iter()
                        .all(|t| t.engine.is_some() && t.drift_requests == 0 && t.held_requests == 0);
                settled.then_some(targets)
            })
            .await;
        for t in &targets {
            let engine = t.engine.as_ref().unwrap();
            assert_eq!(engine.max_total_tokens, infera_testkit::engine::DEFAULT_MAX_TOTAL_TOKENS, "{t:?}");
            assert_eq!(engine.running_requests + engine.queued_requests, 0, "{t:?}");
        }
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

#[test]
fn dp_size_is_read_from_the_real_server_info() {
    run(async {
        let w = world().await;
        let mut record: RegisteredWorker = w.dp.record.clone().into();
        record.dp_size = None;
        let mut control = ControlSpec::new(Workers::Registered(vec![record])).start().await.expect("control");
        let ranks = eventually(sglang::SETTLED, "control to list dp-0's ranks", async || {
            let targets = control.targets().await;
            let ranks: BTreeSet<u32> =
                targets.iter().filter_map(|t| t.target.as_ref()).map(|t| t.dp_rank).collect();
            (!ranks.is_empty()).then_some(ranks)
        })
        .await;
        assert_eq!(ranks, BTreeSet::from([0, 1]), "SGLang's /server_info says dp_size 2");
        control.stop().await.unwrap();
    });
}

#[test]
fn decode_picks_spread_over_the_dp_ranks_and_the_engine_honours_them() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(DP_MODEL, [w.dp.record.clone()]).await;
        let mut decisions = cluster
            .control
            .admin()
            .await
            .watch_decisions(pb::WatchDecisionsRequest::default())
            .await
            .unwrap()
            .into_inner();
        let url = cluster.proxies[0].url.clone();
        let calls = (0..8).map(|i| {
            let url = url.clone();
            async move {
                let id = format!("dp-{i}");
                let body = json!({"model": DP_MODEL, "text": "The quick brown fox", "sampling_params":
                    {"max_new_tokens": 48, "ignore_eos": true, "temperature": 0}});
                let headers = [("x-request-id", id.as_str())];
                let (status, text) =
                    http::request_with(http::Method::POST, &format!("{url}/generate"), Some(&body), &headers)
                        .await
                        .unwrap();
                assert!(status.is_success(), "{status} {text}");
                let answer: Value = serde_json::from_str(&text).unwrap();
                (id, answer["meta_info"]["dp_rank"].as_u64().expect("SGLang names the rank that served it"))
            }
        });
        let served: BTreeMap<String, u64> = futures_util::future::join_all(calls).await.into_iter().collect();
        let mut picked = BTreeMap::new();
        while picked.len() < served.len() {
            let event = tokio::time::timeout(Duration::from_secs(10), decisions.message())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            picked.insert(event.request_id, u64::from(event.chosen.unwrap().dp_rank));
        }
        assert_eq!(picked, served, "each request ran on the rank control picked");
        let ranks: BTreeSet<u64> = served.values().copied().collect();
        assert_eq!(ranks, BTreeSet::from([0, 1]), "eight concurrent requests use both ranks");
        engine_idle(&w.dp).await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

#[test]
fn the_load_socket_feeds_control_without_polling() {
    run(async {
        let w = world().await;
        let records = [w.single.record.clone()];
        assert!(records[0].load_events.is_some(), "mixed-0 publishes its load");
        let mut control = ControlSpec::new(Workers::Records(records.to_vec()))
            .flags(["--engine-poll-ms", "0"])
            .start()
            .await
            .unwrap();
        let proxy = ProxySpec::new(control.url()).start().await.unwrap();
        proxy.wait_ready(MODEL).await.unwrap();
        let body = json!({"model": MODEL, "prompt": "The quick brown fox", "max_tokens": 8});
        let (status, text) = http::post_json(&format!("{}/v1/completions", proxy.url), &body).await.unwrap();
        assert!(status.is_success(), "{status} {text}");
        eventually(sglang::SETTLED, "a reading of mixed-0 from its load socket alone", async || {
            control.targets().await.iter().any(|t| t.engine.as_ref().is_some_and(|e| e.max_total_tokens > 0))
        })
        .await;
        let mut proxy = proxy;
        proxy.stop().await.unwrap();
        control.stop().await.unwrap();
    });
}

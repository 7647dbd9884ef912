//! Real SGLang 0.5.23 aggregated workers (the tiny model on CPU) behind control and proxies:
//! the OpenAI and SGLang APIs answered as SGLang answers them, engine readings, DP ranks.

mod sglang;

use std::process::Command;

use infera_testkit::{ClusterSpec, Engine, EngineSpec};
use serde_json::Value;
use tokio::sync::OnceCell;

use sglang::{comparable, engine_idle, here, python, run, stream_summary};

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
            let single = EngineSpec::mixed("mixed-0", MODEL).kv_events("kv").start();
            let dp = EngineSpec::mixed("dp-0", DP_MODEL).dp(2).kv_events("kv").start();
            let (single, dp) = tokio::join!(single, dp);
            World { single: single.expect("start mixed-0"), dp: dp.expect("start dp-0") }
        })
        .await
}

fn tokenizer_flags() -> Vec<String> {
    let model = infera_testkit::engine::model_dir();
    vec!["--tokenizer".to_owned(), model.join("tokenizer.json").display().to_string()]
}

#[test]
fn the_openai_client_gets_what_sglang_answers_through_a_proxy() {
    run(async {
        let w = world().await;
        let mut spec = ClusterSpec::new(MODEL, Vec::new()).running([w.single.record.clone()]);
        spec.proxies = 1;
        spec.proxy_flags = tokenizer_flags();
        let cluster = spec.start().await.expect("cluster");
        let (proxy, direct) = (cluster.proxies[0].url.clone(), w.single.url.clone());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(python()).arg(here().join("openai_calls.py")).args([&proxy, &direct, MODEL]).output()
        })
        .await
        .unwrap()
        .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let answers: Value = serde_json::from_slice(&out.stdout).unwrap();
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
            assert_eq!(proxy, direct, "{case}: the proxy's answer differs from SGLang's");
        }
        engine_idle(&w.single).await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

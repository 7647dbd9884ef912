//! The real binaries, driven until every family the dashboard and the alerts read has samples,
//! then scraped: control (with etcd, so it campaigns and leads) and a proxy as processes, two
//! KV-publishing prefills and a two-rank decode (in this process; they export no metrics).
//!
//! What the traffic is for (the families it fills in):
//! - control killed and restarted while the proxy serves: the proxy's fallback picks, the new
//!   leader's takeover and its re-declared legs;
//! - a decode that fails one request with `--eject-after-failures 1`: a failed leg, an
//!   ejection, the proxy's retry;
//! - a conversation's turns through the proxy's tokenizer: the prefills' KV events, control's
//!   prefix index and KV-aware prefill picks;
//! - streamed answers: TTFT and ITL; two at once through a proxy that admits one and lets a
//!   request wait 1 ms, while one request holds the place: a 503 `overloaded`;
//! - a mixed worker of its own model loaded directly with prompts and answers of varied
//!   lengths: the engine's `decode_moments` give control a W fit.

use std::time::Duration;

use infera_deploy::exposition::Scrape;

use crate::fitted;
use infera_testkit::{ClusterSpec, ControlSpec, SimSpec, Workers, eventually, http};
use serde_json::{Value, json};

const MODEL: &str = "m";
/// The prefills' KV page, in tokens.
const PAGE: u32 = 16;
/// How long the traffic may take to fill every family in.
const FILLED: Duration = Duration::from_secs(60);

/// Series that must have a sample before the scrape is taken, so that their labels are
/// checked: each is what one part of the traffic makes.
const AWAITED: [(&str, &str); 21] = [
    ("control", "infera_router_ejections_total"),
    ("control", "infera_router_target_ejected"),
    ("control", "infera_router_decode_demand_requests"),
    ("control", "infera_router_pick_duration_seconds_bucket"),
    ("control", "infera_router_demand_drift_requests"),
    ("control", "infera_kv_batches_total"),
    ("control", "infera_router_prefill_pick_cached_tokens_total"),
    ("control", "infera_router_decode_request_weight"),
    ("control", "infera_router_decode_request_weight_fitted"),
    ("control", "infera_router_decode_request_weight_fit_r_squared"),
    ("control", "infera_router_decode_step_predicted_ms"),
    ("proxy", "infera_proxy_fallback_picks_total"),
    ("proxy", "infera_proxy_ttft_seconds_bucket"),
    ("proxy", "infera_proxy_retries_total"),
    ("proxy", "infera_proxy_rejected_total"),
    ("proxy", "infera_proxy_tokenizer_checks_total"),
    ("proxy", "infera_proxy_tokenize_cache_total"),
    ("proxy", "infera_proxy_prompt_tokens_total"),
    ("proxy", "infera_proxy_request_duration_seconds_bucket"),
    ("proxy", "infera_proxy_worker_ttft_seconds_bucket"),
    ("proxy", "infera_proxy_build_info"),
];

/// Runs the deployment and its traffic; the scrape of every `/metrics` endpoint at the end.
///
/// # Panics
/// When a part does not start or the traffic does not fill the families in time.
pub(crate) async fn scrape() -> Scrape {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let tokenizer = infera_tokenize::fixture::write_model_dir(dir.path(), 2_000).expect("a tokenizer");
    let model_dir = dir.path().to_str().expect("a UTF-8 path").to_owned();
    let sim = |spec: SimSpec| {
        spec.seed(11).speedup(20.0).page_size(PAGE).extra([
            "--tokenizer-path",
            &model_dir,
            "--enable-cache-report",
        ])
    };
    let sims = vec![
        sim(SimSpec::prefill("prefill-0", MODEL).kv_events("kv")),
        sim(SimSpec::prefill("prefill-1", MODEL).kv_events("kv")),
        sim(SimSpec::decode("decode-0", MODEL, 2)),
        fitted::sim(),
    ];
    let mut spec = ClusterSpec::new(MODEL, sims);
    spec.control = ControlSpec::new(Workers::None).flags([
        "--decode-input-demand",
        "on",
        "--decode-request-weight",
        "auto",
        "--eject-after-failures",
        "1",
        "--engine-poll-ms",
        "50",
    ]);
    spec.etcd = Some(Duration::from_secs(5));
    spec.processes = true;
    spec.sims_in_process = true;
    spec.proxies = 1;
    let tokenizer = tokenizer.display().to_string();
    spec.proxy_flags = ["--tokenizer", &tokenizer, "--max-inflight", "1", "--queue-timeout-ms", "1"]
        .map(str::to_owned)
        .into();
    let mut cluster = spec.start().await.expect("the deployment starts");
    let proxy = cluster.proxies[0].url.clone();
    let url = format!("{proxy}/v1/chat/completions");

    // No control: the proxy picks by itself. Then a new control leads and the proxy returns.
    cluster.control.node.kill();
    let hello = json!([{"role": "user", "content": "hello while control is away"}]);
    assert_eq!(chat(&url, &hello).await.0, 200, "a fallback pick serves");
    let control = cluster.control.node.process().expect("control runs as a process");
    tokio::task::block_in_place(|| control.restart()).expect("control restarts");
    cluster.control.wait_leading().await.expect("the restarted control leads");
    cluster.proxies[0].wait_ready(MODEL).await.expect("the proxy routes through control again");

    // One request holds the proxy's only place (its decode hangs until released), so the next
    // waits for it longer than it may: a 503 `overloaded`.
    let decode = cluster.sim("decode-0");
    decode.faults(json!({"hang": true})).await;
    let held = tokio::spawn({
        let (url, hello) = (url.clone(), hello.clone());
        async move { chat(&url, &hello).await }
    });
    eventually(FILLED, "the first request to be in flight", async || {
        let text = http::get_ok(&format!("{proxy}/metrics")).await.ok()?;
        text.lines().any(|l| l == "infera_proxy_inflight_requests 1").then_some(())
    })
    .await;
    let refused = chat(&url, &hello).await;
    assert_eq!(refused.0, 503, "no place in time: {refused:?}");
    decode.faults(json!({"hang": false})).await;
    let served = held.await.expect("the held request ends");
    assert_eq!(served.0, 200, "it is served once the decode moves again: {served:?}");

    let load = fitted::load(&cluster.sim(fitted::NAME).url);
    // The next decode request fails once: its rank is ejected, the request retried.
    cluster.sim("decode-0").faults(json!({"fail_next": 1})).await;
    let mut messages = infera_tokenize::fixture::conversation(3, 1, 400, true);
    let control = &cluster.control;
    let mut turn = 0;
    eventually(FILLED, "every awaited family to have a sample", async || {
        // One session, so its turns go through the proxy's session cache.
        let (status, body) = chat_in_session(&url, &json!(messages), "monitoring").await;
        assert_eq!(status, 200, "{body}");
        turn += 1;
        messages.push(json!({"role": "assistant", "content": "the of and to"}));
        messages.push(json!({"role": "user", "content": format!("and question {turn} about the pages")}));
        let texts = [
            ("control", control.metrics().await.ok()?),
            ("proxy", http::get_ok(&format!("{proxy}/metrics")).await.ok()?),
        ];
        AWAITED
            .iter()
            .all(|(source, name)| texts.iter().any(|(s, t)| s == source && has_sample(t, name)))
            .then_some(())
    })
    .await;
    load.stop().await;

    let mut scrape = Scrape::default();
    let control_text = cluster.control.metrics().await.expect("control's /metrics");
    let proxy_text = cluster.proxies[0].metrics().await.expect("the proxy's /metrics");
    dump(&[("control", &control_text), ("proxy", &proxy_text)]);
    scrape.add("infera-control", &control_text);
    scrape.add("infera-proxy", &proxy_text);
    cluster.stop().await.expect("the deployment stops");
    scrape
}

/// A streamed chat completion of `messages`: the status and the whole SSE body.
async fn chat(url: &str, messages: &Value) -> (u16, String) {
    post(url, json!({"model": MODEL, "messages": messages, "max_tokens": 8, "stream": true})).await
}

/// [`chat`] with `user` as the session key.
async fn chat_in_session(url: &str, messages: &Value, user: &str) -> (u16, String) {
    post(url, json!({"model": MODEL, "messages": messages, "max_tokens": 8, "stream": true, "user": user}))
        .await
}

async fn post(url: &str, body: Value) -> (u16, String) {
    let (status, text) = http::post_json(url, &body).await.expect("the proxy answers");
    (status.as_u16(), text)
}

fn has_sample(text: &str, name: &str) -> bool {
    text.lines().any(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
}

/// With `INFERA_DEPLOY_SCRAPE_DIR` set, writes each scrape there (`<source>.txt`): what the
/// dashboard and the rules were written from.
fn dump(texts: &[(&str, &str)]) {
    let Some(dir) = std::env::var_os("INFERA_DEPLOY_SCRAPE_DIR") else { return };
    for (source, text) in texts {
        std::fs::write(std::path::Path::new(&dir).join(format!("{source}.txt")), text)
            .expect("the dump is written");
    }
}

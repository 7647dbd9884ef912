//! What an operator reads of the proxy: requests by model, tokens the engines reported,
//! durations and TTFT per model and worker, the build, and one access line per request.

use http::StatusCode;
use infera_testkit::node::Node;
use serde_json::{Value, json};

use crate::harness::*;

/// The value of the sample `series` (name and labels exactly as exported), if any.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_per_model_with_the_tokens_the_engines_reported_and_logged_once_each() {
    let cluster = Cluster::start(Shape { proxies: 0, decode_dp: 2, ..Shape::default() }).await;
    let proxy = spawn_proxy(cluster.control_addr, &["--log", "warn,access=info"]).await;
    wait_ready(&proxy).await;
    let url = format!("{}/v1/chat/completions", proxy.url);

    let (status, whole) = post_json(&url, &chat(5, false), &[("x-request-id", "obs-whole")]).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let whole: Value = serde_json::from_str(&whole).unwrap();
    let mut streamed = chat(4, true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (status, text) = post_json(&url, &streamed, &[("x-request-id", "obs-stream")]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let last: Value = sse_events(&text)
        .iter()
        .rev()
        .find_map(|e| serde_json::from_str::<Value>(e).ok().filter(|v| v["usage"].is_object()))
        .unwrap_or_else(|| panic!("no usage in {text}"));
    let unknown = json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]});
    let (status, _) = post_json(&url, &unknown, &[("x-request-id", "obs-unknown")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let usage =
        |field: &str| whole["usage"][field].as_f64().unwrap() + last["usage"][field].as_f64().unwrap();
    let (_, metrics) = get(&format!("{}/metrics", proxy.url)).await;
    let m = |series: &str| sample(&metrics, series).unwrap_or_else(|| panic!("no {series} in\n{metrics}"));
    assert_eq!(m(r#"infera_proxy_requests_total{api="chat_completions",model="m",code="200"}"#), 2.0);
    // A model nobody serves is never a label.
    assert_eq!(m(r#"infera_proxy_requests_total{api="chat_completions",model="",code="404"}"#), 1.0);
    assert!(!metrics.contains("nope"), "{metrics}");
    assert_eq!(m(r#"infera_proxy_prompt_tokens_total{model="m"}"#), usage("prompt_tokens"));
    assert_eq!(m(r#"infera_proxy_completion_tokens_total{model="m"}"#), usage("completion_tokens"));
    assert_eq!(m(r#"infera_proxy_request_duration_seconds_count{api="chat_completions",model="m"}"#), 2.0);
    assert_eq!(m(r#"infera_proxy_worker_ttft_seconds_count{model="m",worker="decode-0"}"#), 2.0);
    let build = format!(r#"infera_proxy_build_info{{version="{}"}}"#, env!("CARGO_PKG_VERSION"));
    assert_eq!(m(&build), 1.0);

    // One access line per request, with its targets and tokens.
    let Node::Process(process) = &proxy.node else { panic!("a spawned proxy") };
    let lines = process.stderr_tail();
    for id in ["obs-whole", "obs-stream", "obs-unknown"] {
        let of_id: Vec<&str> = lines.lines().filter(|l| l.contains(id)).collect();
        assert_eq!(of_id.len(), 1, "one access line for {id}:\n{lines}");
    }
    let whole_line = lines.lines().find(|l| l.contains("obs-whole")).unwrap();
    for part in
        ["status=200", "outcome=\"eof\"", "model=\"m\"", "prefill=\"prefill-0/0\"", "decode=\"decode-0/"]
    {
        assert!(whole_line.contains(part), "{part} in {whole_line}");
    }
    let completion = format!("completion_tokens={}", whole["usage"]["completion_tokens"]);
    assert!(whole_line.contains(&completion), "{completion} in {whole_line}");
    let unknown_line = lines.lines().find(|l| l.contains("obs-unknown")).unwrap();
    assert!(
        unknown_line.contains("status=404") && unknown_line.contains("outcome=\"refused\""),
        "{unknown_line}"
    );
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

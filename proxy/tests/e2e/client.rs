//! The test client: HTTP requests to proxies and sims and SSE parsing (the kit's:
//! [`infera_testkit::http`], [`infera_testkit::sse`]), request bodies, and tools of the venv.

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use infera_testkit::http::{self as kit, Method};
use serde_json::Value;

use crate::harness::MODEL;

pub(crate) async fn get(url: &str) -> (StatusCode, String) {
    get_with(url, &[]).await
}

/// A GET with these headers.
pub(crate) async fn get_with(url: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let resp = kit::send(Method::GET, url, Bytes::new(), headers).await.unwrap();
    let status = resp.status();
    (status, String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap())
}

/// Sends a request and returns the response head and body (unread).
pub(crate) async fn send(url: &str, body: Bytes, headers: &[(&str, &str)]) -> http::Response<Incoming> {
    let headers = [&[("content-type", "application/json")], headers].concat();
    kit::send(Method::POST, url, body, &headers).await.unwrap()
}

pub(crate) async fn post_json(url: &str, body: &Value, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let resp = send(url, Bytes::from(body.to_string()), headers).await;
    let status = resp.status();
    let body = resp.into_body().collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The `data:` payloads of an SSE body.
pub(crate) fn sse_events(body: &str) -> Vec<String> {
    infera_testkit::sse::data(body)
}

pub(crate) fn chat(max_tokens: u32, stream: bool) -> Value {
    serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me about prefill and decode disaggregation."}],
        "max_tokens": max_tokens,
        "stream": stream,
    })
}

/// A tool of the project's venv (`cargo xtask setup`): `$env` when set, else `.venv/bin/<name>`.
pub(crate) fn venv_tool(env: &str, name: &str) -> std::path::PathBuf {
    let path = std::env::var_os(env).map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin").join(name)
    });
    assert!(path.exists(), "{} not found — run `cargo xtask setup` first", path.display());
    path
}

/// The value of `series` in `proxy`'s scrape, once it has one (bounded wait).
pub(crate) async fn value_of(proxy: &str, series: &str) -> f64 {
    let url = format!("{proxy}/metrics");
    infera_testkit::eventually(std::time::Duration::from_secs(20), series, async || {
        let (_, text) = get(&url).await;
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
    })
    .await
}

/// Runs `script` with the venv's Python (`python -c script args…`) on the blocking pool and
/// reads its standard output as JSON; its standard error when it fails.
pub(crate) async fn python_json(script: &'static str, args: Vec<String>) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(venv_tool("INFERA_PYTHON", "python"))
            .arg("-c")
            .arg(script)
            .args(args)
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

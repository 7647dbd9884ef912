//! What the real-engine test binaries share: one runtime for the whole binary (its servers and
//! in-process parts live on it), one lock so that the binary's tests run one at a time (each
//! asserts that engines and the ledger return to zero, which another test's traffic would
//! spoil), and the checks they make.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use infera_testkit::{Engine, eventually};
use serde_json::Value;
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

/// The binary's runtime: servers started by one test serve the next.
pub static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
});

static SERIAL: Mutex<()> = Mutex::const_new(());

/// Runs one test's body on the binary's runtime, after the tests before it.
pub fn run<F: Future<Output = ()>>(body: F) {
    RUNTIME.block_on(async {
        let _turn = SERIAL.lock().await;
        body.await;
    });
}

/// How long engines may take to end what they run once the clients are gone.
pub const SETTLED: Duration = Duration::from_secs(30);

/// Waits (bounded) until `engine` runs and queues nothing.
pub async fn engine_idle(engine: &Engine) {
    let name = format!("{} to run and queue nothing", engine.record.id.as_str());
    eventually(SETTLED, &name, async || engine.in_flight().await.ok() == Some(0)).await;
}

/// The Python of the project's venv (the real OpenAI client).
pub fn python() -> PathBuf {
    let path = std::env::var_os("INFERA_PYTHON")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"), PathBuf::from);
    assert!(path.exists(), "{} not found: run `cargo xtask setup` first", path.display());
    path
}

/// This folder (the Python drivers).
pub fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sglang")
}

/// The answer with what differs between two calls of the same request taken out: ids,
/// creation times, timings (SGLang's `meta_info` under `--enable-metrics`), and how much of the
/// prompt the radix cache already held.
pub fn comparable(v: &Value) -> Value {
    const VOLATILE: &[&str] = &[
        "id",
        "created",
        "created_at",
        "e2e_latency",
        "response_sent_to_client_ts",
        "cached_tokens",
        "cached_tokens_details",
        "prompt_tokens_details",
        "input_tokens_details",
        "response_id",
        "item_id",
        // A Responses stream numbers its events, and how many there are depends on chunking.
        "sequence_number",
    ];
    const TIMING: &[&str] = &["_time", "_ts", "_latency", "_wait", "_throughput"];
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !VOLATILE.contains(&k.as_str()) && !TIMING.iter().any(|t| k.ends_with(t)))
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        other => other.clone(),
    }
}

/// A stream of chunks as what two streams of the same request share: SGLang's chunk
/// boundaries depend on how many decode steps its tokenizer manager finds ready at once, so
/// two streams of one request may split the same text differently. Kept: the text deltas
/// joined, the last chunk (usage, the completed response, a cumulative `/generate` event),
/// the key paths any chunk has, and the event types in order without repeats.
pub fn stream_summary(chunks: &[Value]) -> Value {
    let mut text = String::new();
    let mut paths = std::collections::BTreeSet::new();
    let mut types: Vec<String> = Vec::new();
    for chunk in chunks {
        collect(chunk, "", &mut text, &mut paths);
        if let Some(t) = chunk["type"].as_str()
            && types.last().is_none_or(|last| last != t)
        {
            types.push(t.to_owned());
        }
    }
    let last = chunks.iter().rev().find(|c| c.is_object()).map(|c| without_deltas(&comparable(c), ""));
    let last = last.unwrap_or(Value::Null);
    serde_json::json!({ "text": text, "paths": paths, "types": types, "last": last })
}

/// Whether the member `key` under `path` is a piece of the streamed text.
fn is_delta(path: &str, key: &str) -> bool {
    matches!(key, "content" | "delta") || (key == "text" && path.ends_with("[]"))
}

/// `v` with its text pieces taken out (they are compared joined).
fn without_deltas(v: &Value, path: &str) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| !(is_delta(path, k) && v.is_string()))
                .map(|(k, v)| (k.clone(), without_deltas(v, &format!("{path}.{k}"))))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(|i| without_deltas(i, &format!("{path}[]"))).collect())
        }
        other => other.clone(),
    }
}

fn collect(v: &Value, path: &str, text: &mut String, paths: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{path}.{k}");
                let delta =
                    matches!(k.as_str(), "content" | "delta") || (k == "text" && path.ends_with("[]"));
                if let (true, Some(s)) = (delta, v.as_str()) {
                    text.push_str(s);
                }
                collect(v, &p, text, paths);
                paths.insert(p);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, &format!("{path}[]"), text, paths)),
        _ => {}
    }
}

/// Sends `body` to `url` (a streaming request), reads until the first SSE event has arrived,
/// and hangs up: what a client that goes away mid-answer does.
pub async fn hang_up_after_first_event(url: &str, path: &str, body: &Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body = serde_json::to_vec(body).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(6).any(|w| w == b"data: ") {
        let n = tokio::time::timeout(SETTLED, s.read(&mut buf)).await.expect("a first event").unwrap();
        assert!(n > 0, "the stream ended before its first event: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(seen.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&seen));
    drop(s);
}

/// A counter of an SGLang server's `/metrics` (`--enable-metrics`), summed over its labels.
pub async fn sglang_counter(engine: &Engine, name: &str) -> f64 {
    let text = infera_testkit::http::get_ok(&format!("{}/metrics", engine.url)).await.expect("/metrics");
    infera_testkit::http::metric_sum(&text, name, "")
}

/// Where two JSON values first differ, as a path and both sides (for assertion messages).
pub fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (l, r) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                first_difference(l, r, &format!("{path}.{k}"))
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (l, r))| first_difference(l, r, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} ≠ {b}")),
    }
}

/// Runs `openai_calls.py` (the real OpenAI client, and raw `/generate`) against `proxy` and, when
/// given, `direct`, but for the cases in `skip`: `{case: {"proxy": answer, "direct": answer or null}}`.
pub async fn openai_calls(proxy: &str, direct: Option<&str>, model: &str, skip: &[&str]) -> Value {
    let mut args = vec![proxy.to_owned(), direct.unwrap_or("-").to_owned(), model.to_owned()];
    args.extend(skip.iter().map(|s| (*s).to_owned()));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python()).arg(here().join("openai_calls.py")).args(args).output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The tiny model's tokenizer for a proxy (`--tokenizer`).
pub fn tokenizer_flags() -> Vec<String> {
    let model = infera_testkit::engine::model_dir();
    vec!["--tokenizer".to_owned(), model.join("tokenizer.json").display().to_string()]
}

/// A control and one proxy (with the tiny model's tokenizer) over running workers.
pub async fn cluster_over(
    model: &str,
    records: impl IntoIterator<Item = infera_proto::types::WorkerRecord>,
) -> infera_testkit::Cluster {
    let mut spec = infera_testkit::ClusterSpec::new(model, Vec::new()).running(records);
    spec.proxies = 1;
    spec.proxy_flags = tokenizer_flags();
    spec.start().await.expect("cluster")
}

/// Sends `body` to `url` with `x-request-id: id` and returns the connection without reading
/// from it: dropping it is a client that gives up before any answer.
pub async fn send_and_hold(url: &str, path: &str, id: &str, body: &Value) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body = serde_json::to_vec(body).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nx-request-id: {id}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    s.flush().await.unwrap();
    s
}

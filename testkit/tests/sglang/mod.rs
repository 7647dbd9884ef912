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
/// creation times, latencies, and how much of the prompt the radix cache already held.
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
    ];
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
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
    let last = chunks.iter().rev().find(|c| c.is_object()).map(comparable).unwrap_or(Value::Null);
    serde_json::json!({ "text": text, "paths": paths, "types": types, "last": last })
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

//! API keys on a proxy process: 401 `invalid_api_key` without a listed key, 429 with
//! `Retry-After` over a key's rate, the key's name (never the key) in the metrics, the header
//! kept from the workers, and the file read again on SIGHUP (a broken file keeps the keys).

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::harness::*;

fn entry(name: &str, key: &str, rate: Option<u32>) -> String {
    let hex: String = Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let rate = rate.map(|r| format!("tokens_per_second = {r}\n")).unwrap_or_default();
    format!("[[keys]]\nname = \"{name}\"\nsha256 = \"{hex}\"\n{rate}\n")
}

async fn call(url: &str, key: Option<&str>) -> (StatusCode, Value, Option<String>) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let resp = send(url, Bytes::from(chat(4, false).to_string()), &headers).await;
    let status = resp.status();
    let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let body = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null), retry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_required_rate_limited_named_not_forwarded_and_reloaded_on_sighup() {
    let cluster = Cluster::start(Shape { proxies: 0, ..Shape::default() }).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        entry("team-a", "alpha-secret", None) + &entry("team-b", "beta-secret", Some(1)),
    )
    .unwrap();
    let keys = file.path().display().to_string();
    let mut proxy = spawn_proxy(cluster.control_addr, &["--api-keys", &keys]).await;
    eventually(Duration::from_secs(30), "the proxy to list the model to a keyed caller", async || {
        let auth = [("authorization", "Bearer alpha-secret")];
        let (status, text) = get_with(&format!("{}/v1/models", proxy.url), &auth).await;
        (status == StatusCode::OK && text.contains(&format!("\"id\":\"{MODEL}\""))).then_some(())
    })
    .await;
    let url = format!("{}/v1/chat/completions", proxy.url);

    for key in [None, Some("nope"), Some("alpha-secre")] {
        let (status, v, _) = call(&url, key).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{key:?}");
        assert_eq!(
            (v["error"]["type"].as_str(), v["error"]["code"].as_str()),
            (Some("invalid_request_error"), Some("invalid_api_key"))
        );
    }
    let (status, _, _) = call(&url, Some("alpha-secret")).await;
    assert_eq!(status, StatusCode::OK);
    let (models, _) = get(&format!("{}/v1/models", proxy.url)).await;
    assert_eq!(models, StatusCode::UNAUTHORIZED, "/v1/models needs a key too");
    // The worker never saw the client's key.
    assert!(cluster.decode().requests().await.iter().all(|r| r["authorization"] == false));

    // team-b may send one prompt token a second: the second request within the second is 429.
    assert_eq!(call(&url, Some("beta-secret")).await.0, StatusCode::OK);
    let (status, v, retry) = call(&url, Some("beta-secret")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(retry.is_some_and(|r| r.parse::<u64>().unwrap() >= 1));

    // A new key, then SIGHUP: it works. A broken file, then SIGHUP: the keys in force stay.
    std::fs::write(file.path(), entry("team-c", "gamma-secret", None)).unwrap();
    proxy.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the reloaded key to be accepted", async || {
        (call(&url, Some("gamma-secret")).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    assert_eq!(call(&url, Some("alpha-secret")).await.0, StatusCode::UNAUTHORIZED, "the old file is gone");
    std::fs::write(file.path(), "[[keys]]\nname = \"broken\"\n").unwrap();
    proxy.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the broken file's reload to be refused", async || {
        let metrics = proxy.metrics().await.ok()?;
        metrics.contains("infera_proxy_api_key_reloads_total{outcome=\"error\"} 1").then_some(())
    })
    .await;
    assert_eq!(call(&url, Some("gamma-secret")).await.0, StatusCode::OK, "a broken file keeps the keys");
    // One quote missing: not TOML, and not a list of keys either (its lines never become keys).
    std::fs::write(file.path(), "[[keys]]\nname = \"alice\nsha256 = \"00\"\n").unwrap();
    proxy.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the unparsable file's reload to be refused", async || {
        let metrics = proxy.metrics().await.ok()?;
        metrics.contains("infera_proxy_api_key_reloads_total{outcome=\"error\"} 2").then_some(())
    })
    .await;
    for line in ["[[keys]]", "name = \"alice", "sha256 = \"00\""] {
        assert_eq!(call(&url, Some(line)).await.0, StatusCode::UNAUTHORIZED, "{line} is not a key");
    }
    assert_eq!(call(&url, Some("gamma-secret")).await.0, StatusCode::OK);

    let metrics = proxy.metrics().await.unwrap();
    assert!(
        metrics.contains("infera_proxy_api_key_requests_total{key=\"team-a\",outcome=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("infera_proxy_api_key_requests_total{key=\"team-b\",outcome=\"rate_limited\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains("secret"), "no key text in the metrics");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

//! `https://` workers (an engine started with SGLang's `--ssl-certfile`): control reads them and
//! a proxy sends legs to them over TLS verified against the workers' CA (`--worker-ca`), and a
//! part without that CA never reaches them in plain text.

use std::path::Path;

use infera_testkit::http::post_json;
use infera_testkit::tls::TestCa;
use infera_testkit::{ClusterSpec, ControlSpec, ProxySpec, SimSpec, Workers, eventually};
use serde_json::json;

use crate::harness::MODEL;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_workers_are_reached_over_tls_and_never_in_plain_text() {
    let ca = TestCa::new("workers");
    let cert = ca.issue("worker", &["127.0.0.1"]);
    let tls = [
        "--ssl-certfile".to_owned(),
        cert.cert.display().to_string(),
        "--ssl-keyfile".to_owned(),
        cert.key.display().to_string(),
    ];
    let sims = vec![SimSpec::mixed("mixed-0", MODEL, 1).extra(tls.clone())];
    let worker_ca = ["--worker-ca".to_owned(), ca.ca().display().to_string()];
    let mut spec = ClusterSpec::new(MODEL, sims);
    spec.control = ControlSpec::new(Workers::None).flags(worker_ca.clone());
    spec.proxies = 1;
    spec.proxy_flags = worker_ca.to_vec();
    let cluster = spec.start().await.unwrap();
    let sim = &cluster.sims[0];
    assert!(sim.record.url.starts_with("https://"), "{}", sim.record.url);
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let url = format!("{}/v1/chat/completions", cluster.proxies[0].url);
    let (status, body) = post_json(&url, &chat).await.unwrap();
    assert!(status.is_success(), "{status} {body}");
    assert_eq!(requests(&sim.url, &ca.ca()).await, 1, "the request reached the worker over TLS");

    // A proxy without the workers' CA is given the same https:// worker: it fails the leg with a
    // clear error instead of sending it in plain text, and the worker sees nothing new.
    let plain = ProxySpec::new(cluster.control.url()).start().await.unwrap();
    plain.wait_ready(MODEL).await.unwrap();
    let (status, body) = post_json(&format!("{}/v1/chat/completions", plain.url), &chat).await.unwrap();
    assert_eq!(status.as_u16(), 502, "{body}");
    assert!(body.contains("--worker-ca") && !body.contains("127.0.0.1"), "{body}");
    assert_eq!(requests(&sim.url, &ca.ca()).await, 1, "nothing reached the worker");

    // A control without the CA cannot read the engine: the worker never becomes a target.
    let blind = ControlSpec::new(Workers::Records(vec![sim.record.clone()])).start().await.unwrap();
    let what = "control without --worker-ca to count its failed /server_info reads";
    eventually(std::time::Duration::from_secs(10), what, async || {
        let m = blind.metrics().await.unwrap_or_default();
        infera_testkit::http::metric_sum(&m, "infera_router_engine_facts_failures_total", "") >= 1.0
    })
    .await;
    assert!(blind.targets().await.is_empty(), "an unread https worker is no target");
    cluster.ledger_returns_to_zero().await.unwrap();
}

/// How many data-plane requests the sim at `url` logged, asked over HTTPS trusting `ca` (curl).
async fn requests(url: &str, ca: &Path) -> usize {
    let (url, ca) = (format!("{url}/sim/requests"), ca.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl").args(["-sS", "--cacert"]).arg(&ca).arg(&url).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array().or_else(|| v["requests"].as_array()).map_or(0, Vec::len)
}

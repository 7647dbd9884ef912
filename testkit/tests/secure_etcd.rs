//! A whole deployment on an etcd secured as deployments run it (TLS, client certificates
//! required, auth with infera's roles), every part a real process: the workers registered as
//! `infera-launch`, control following them as `infera-control`, and requests through the
//! proxies; intruders still write nothing.

use std::time::Duration;

use infera_testkit::{ClusterSpec, SimSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_on_a_secured_etcd_serves_and_keeps_intruders_out() {
    let mut spec =
        ClusterSpec::new("m", vec![SimSpec::prefill("prefill-0", "m"), SimSpec::decode("decode-0", "m", 2)]);
    spec.etcd = Some(Duration::from_secs(10));
    spec.etcd_secured = true;
    spec.processes = true;
    spec.proxies = 1;
    let cluster = spec.start().await.unwrap();
    let proxy = &cluster.proxies[0];
    let chat =
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let (status, body) =
        infera_testkit::http::post_json(&format!("{}/v1/chat/completions", proxy.url), &chat).await.unwrap();
    assert_eq!(status.as_u16(), 200, "{body}");
    let etcd = cluster.etcd.as_ref().unwrap();
    assert!(etcd.url().starts_with("https://"));
    // Control and the proxies keep writing meanwhile: only the intruders' writes must be absent.
    let refusals = etcd.intrude().await;
    assert!(refusals.len() > 20, "{refusals:?}");
    cluster.ledger_returns_to_zero().await.unwrap();
}

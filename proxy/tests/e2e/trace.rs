//! W3C trace context with OTLP export on: the proxy's own span continues the client's trace, and
//! both legs carry the proxy's span as their parent. (Without export, the client's context passes
//! through unchanged: see `pd.rs`.)

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::harness::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// `traceparent` split into (version, trace id, parent span id, flags).
fn parts(traceparent: &str) -> (String, String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    (p[0].into(), p[1].into(), p[2].into(), p[3].into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_otlp_export_both_legs_continue_the_client_trace_under_the_proxy_span() {
    let cluster = Cluster::start(Shape { proxies: 0, ..Shape::default() }).await;
    // A collector that never answers: spans are exported in the background and lost, requests
    // are not affected.
    let collector = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = format!("http://{}", collector.local_addr().unwrap());
    let child = spawn_proxy(cluster.control_addr, &["--otlp-endpoint", &otlp]).await;
    let proxy = child.url.clone();
    wait_ready(&child).await;

    let client_parent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let headers = [("x-request-id", "traced-1"), ("traceparent", client_parent.as_str())];
    let resp =
        send(&format!("{proxy}/v1/chat/completions"), Bytes::from(chat(3, true).to_string()), &headers).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-request-id"], "traced-1");
    resp.into_body().collect().await.unwrap();

    let find = |log: Vec<Value>| log.into_iter().find(|r| r["rid"] == "traced-1").unwrap();
    let p = find(cluster.prefill().unwrap().requests().await);
    let d = find(cluster.decode().requests().await);
    let (pp, dp) = (parts(p["traceparent"].as_str().unwrap()), parts(d["traceparent"].as_str().unwrap()));
    assert_eq!(
        (pp.0.as_str(), pp.1.as_str(), pp.3.as_str()),
        ("00", TRACE_ID, "01"),
        "the client's trace: {p}"
    );
    assert_ne!(pp.2, CLIENT_SPAN, "the parent of the leg is the proxy's span, not the client's: {p}");
    assert_eq!(pp, dp, "both legs under the same proxy span");
    assert_eq!((&p["x_request_id"], &d["x_request_id"]), (&"traced-1".into(), &"traced-1".into()));

    cluster.ledger_returns_to_zero().await;
    drop(child);
    cluster.stop().await;
}

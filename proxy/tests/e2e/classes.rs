//! Service classes through the proxies (`x-infera-service-class`) and control's one admission
//! queue (`--admission on`): requests that find every decode rank full wait in control, across
//! proxies, and the higher class is admitted first; a class control does not define is a 400.

use std::time::Duration;

use http::StatusCode;
use infera_proto::pb;
use serde_json::Value;

use crate::admission::open_stream;
use crate::harness::*;

fn waiting(metrics: &str, class: &str) -> bool {
    let series = format!("infera_router_admission_waiting{{model=\"{MODEL}\",class=\"{class}\"}} 1");
    metrics.lines().any(|l| l == series)
}

/// `decode_dp` decode ranks of one request each under `--admission on`, behind `proxies` that
/// let a request wait `queue_timeout_ms`.
fn one_request_per_rank(decode_dp: u32, proxies: usize, queue_timeout_ms: &'static str) -> Shape {
    Shape {
        decode_dp,
        proxies,
        control_flags: vec![
            "--decode-input-demand",
            "on",
            "--admission",
            "on",
            "--max-requests-per-rank",
            "1",
        ],
        proxy_flags: vec!["--queue-timeout-ms", queue_timeout_ms],
        ..Shape::default()
    }
}

/// A short chat of `class` through `url`, on its own task: its status.
fn chat_as(url: &str, class: &'static str) -> tokio::task::JoinHandle<StatusCode> {
    let url = url.to_owned();
    tokio::spawn(
        async move { post_json(&url, &chat(4, false), &[("x-infera-service-class", class)]).await.0 },
    )
}

/// Waits (bounded) until control's queue holds one request of `class`.
async fn until_waiting(cluster: &Cluster, class: &str, within: Duration) {
    eventually(within, &format!("a {class} request to wait in control"), async || {
        waiting(&cluster.control_metrics().await, class).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_interactive_request_is_admitted_before_an_earlier_batch_one_across_proxies() {
    let cluster = Cluster::start(one_request_per_rank(2, 2, "20000")).await;
    let url = |i: usize| format!("{}/v1/chat/completions", cluster.proxies[i]);
    // Both decode ranks hold a stream.
    let first = open_stream(&url(0)).await;
    let second = open_stream(&url(1)).await;
    // A batch request through one proxy, then an interactive one through the other: both wait in
    // control's queue.
    let batch = chat_as(&url(0), "batch");
    until_waiting(&cluster, "batch", Duration::from_secs(10)).await;
    let interactive = chat_as(&url(1), "interactive");
    until_waiting(&cluster, "interactive", Duration::from_secs(10)).await;
    // One rank frees: the interactive request goes, the batch one still waits.
    drop(first);
    assert_eq!(interactive.await.unwrap(), StatusCode::OK);
    assert!(!batch.is_finished(), "the batch request waits for the next free rank");
    drop(second);
    assert_eq!(batch.await.unwrap(), StatusCode::OK);

    // A class control does not define, and a header that cannot name one: 400s.
    for (class, code) in [("gold", "unknown_service_class"), ("a b", "invalid_request")] {
        let (status, body) = post_json(&url(0), &chat(4, false), &[("x-infera-service-class", class)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], code, "{v}");
    }
    let (_, metrics) = get(&format!("{}/metrics", cluster.proxies[0])).await;
    assert!(
        metrics.contains("infera_proxy_class_requests_total{class=\"batch\",code=\"200\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("infera_proxy_class_requests_total{class=\"-\",code=\"400\"} 2"), "{metrics}");
    let control = cluster.control_metrics().await;
    let waited =
        format!("infera_router_admissions_total{{model=\"{MODEL}\",class=\"batch\",outcome=\"waited\"}} 1");
    assert!(control.lines().any(|l| l == waited), "{control}");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_waits_on_at_the_next_control_instead_of_jumping_the_queue() {
    let mut cluster = Cluster::start(one_request_per_rank(1, 1, "30000")).await;
    let url = format!("{}/v1/chat/completions", cluster.proxies[0]);
    let held = open_stream(&url).await;
    let waiting_request = chat_as(&url, "batch");
    until_waiting(&cluster, "batch", Duration::from_secs(10)).await;
    // A new control instance: the old one turns its waiter away; the proxy re-declares the held
    // stream to the new one and waits there again, rather than routing on its own.
    cluster.restart_control().await;
    until_waiting(&cluster, "batch", Duration::from_secs(15)).await;
    assert!(!waiting_request.is_finished(), "the rank is still full");
    drop(held);
    assert_eq!(waiting_request.await.unwrap(), StatusCode::OK);
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

/// A chat of `tenant` (its API key) through `url` as request `id`, on its own task: its status.
fn chat_of(url: &str, key: &str, id: String) -> tokio::task::JoinHandle<StatusCode> {
    let (url, auth) = (url.to_owned(), format!("Bearer {key}"));
    tokio::spawn(async move {
        post_json(&url, &chat(4, false), &[("authorization", &auth), ("x-request-id", &id)]).await.0
    })
}

/// Waits (bounded) until control's queue holds `n` requests of the default class.
async fn until_n_waiting(cluster: &Cluster, n: usize) {
    let series = format!("infera_router_admission_waiting{{model=\"{MODEL}\",class=\"interactive\"}} {n}");
    eventually(Duration::from_secs(10), &format!("{n} requests to wait in control"), async || {
        cluster.control_metrics().await.lines().any(|l| l == series).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_waits_behind_its_own_share_not_in_front_of_another_tenant_across_proxies() {
    let keys = infera_testkit::ApiKeys::new(&["steady", "flood"]);
    let classes = tempfile::NamedTempFile::new().unwrap();
    // A TTFT target no loaded machine misses: the order is under test, not the shedding.
    let file = "[[classes]]\nname = \"interactive\"\nttft_ms = 60000\nitl_ms = 50\npriority = 1\n\n\
                [tenants]\nweights = { steady = 1, flood = 1 }\n";
    std::fs::write(classes.path(), file).unwrap();
    let leak = |p: &std::path::Path| -> &'static str { Box::leak(p.display().to_string().into_boxed_str()) };
    let mut shape = one_request_per_rank(1, 2, "30000");
    shape.control_flags.extend(["--service-classes", leak(classes.path())]);
    shape.proxy_flags.extend(["--api-keys", leak(&keys.path())]);
    shape.proxy_api_key = Some(keys.key("steady").to_owned());
    let cluster = Cluster::start(shape).await;
    let url = |i: usize| format!("{}/v1/chat/completions", cluster.proxies[i]);
    // The one rank holds a stream; the flood queues six requests through one proxy, then the
    // steady tenant two through the other.
    let auth = format!("Bearer {}", keys.key("steady"));
    let resp =
        send(&url(1), bytes::Bytes::from(chat(50_000, true).to_string()), &[("authorization", &auth)]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut held = resp.into_body();
    http_body_util::BodyExt::frame(&mut held).await.unwrap().unwrap();
    let mut tasks = Vec::new();
    for n in 1..=6 {
        tasks.push(chat_of(&url(0), keys.key("flood"), format!("flood-{n}")));
        until_n_waiting(&cluster, n).await;
    }
    tasks.extend((1..=2).map(|n| chat_of(&url(1), keys.key("steady"), format!("steady-{n}"))));
    until_n_waiting(&cluster, 8).await;
    // One at a time through the freed rank, in the order control's decode picks admit them:
    // first come would serve the flood's six first; by tenant share the steady tenant's two
    // are among the first four.
    let mut decisions = cluster.decisions().await;
    drop(held);
    let mut order = Vec::new();
    while order.len() < 8 {
        let d = tokio::time::timeout(Duration::from_secs(60), decisions.message()).await;
        let d = d.expect("eight decode picks in time").unwrap().expect("the watch stays open");
        if d.kind == pb::PickKind::Decode as i32 {
            order.push(d.request_id.split('-').next().unwrap_or_default().to_owned());
        }
    }
    assert_eq!(order[..4].iter().filter(|t| *t == "steady").count(), 2, "admission order {order:?}");
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    let metrics = cluster.control_metrics().await;
    for tenant in ["steady", "flood"] {
        let series = format!("infera_router_admitted_tokens_total{{model=\"{MODEL}\",tenant=\"{tenant}\"}}");
        assert!(metrics.lines().any(|l| l.starts_with(&series)), "{tenant}: {metrics}");
    }
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

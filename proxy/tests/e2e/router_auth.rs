//! Proxies that prove themselves to control, end to end: one with a token, one with a client
//! certificate, through one control; a proxy without a credential gets no lease; and a token
//! rotated on SIGHUP (control's list, then the proxy's file) without a refused call.

use std::time::Duration;

use infera_testkit::http::metric_sum;
use infera_testkit::tls::TestCa;
use infera_testkit::{ClusterSpec, ControlSpec, ProxySpec, RouterTokens, SimSpec, Workers};

use crate::harness::*;

fn pd_sims() -> Vec<SimSpec> {
    vec![sim(SimSpec::prefill("prefill-0", MODEL)), sim(SimSpec::decode("decode-0", MODEL, 2))]
}

/// A few completions through `proxy`, streamed and not: each answered 200.
async fn traffic(proxy: &str) {
    for i in 0..4 {
        let (status, body) =
            post_json(&format!("{proxy}/v1/chat/completions"), &chat(4, i % 2 == 0), &[]).await;
        assert_eq!(status, http::StatusCode::OK, "{proxy}: {body}");
    }
}

/// Picks a proxy routed locally because control did not answer (0 when control booked each).
async fn fallbacks(proxy: &str) -> f64 {
    metric_sum(&get(&format!("{proxy}/metrics")).await.1, "infera_proxy_fallback_picks_total", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_with_a_token_and_one_with_a_certificate_route_through_one_control() {
    let ca = TestCa::new("infera");
    let server = ca.issue("control", &["127.0.0.1"]);
    let kit = ca.issue("kit", &["kit.test"]);
    // Mutual TLS asks every connection for a certificate; the token then names the proxy.
    let transport = ca.issue("transport-only", &["proxy.test"]);
    let proxy_cert = ca.issue("proxy-cert", &["proxy.test"]);
    let mut tokens = RouterTokens::new();
    let token = tokens.issue("proxy-token");
    let mut spec = ClusterSpec::new(MODEL, pd_sims());
    spec.control = ControlSpec::new(Workers::None)
        .flags(["--decode-input-demand", "on"])
        .tls(&ca, &server)
        .client_certificates(&ca, &kit)
        .router_tokens(&tokens);
    let by_token = [ca.proxy_flags(Some(&transport)), token.proxy_flags()].concat();
    spec.each_proxy = vec![by_token, ca.proxy_flags(Some(&proxy_cert))];
    let cluster = spec.start().await.expect("the cluster starts");
    for proxy in cluster.proxy_urls() {
        traffic(&proxy).await;
        assert_eq!(fallbacks(&proxy).await, 0.0, "{proxy} routed by control");
    }
    // Each proxy holds its lease as its own identity: the token's, the certificate's name.
    let metrics = cluster.control.metrics().await.unwrap();
    for identity in ["proxy-token", "proxy-cert"] {
        let held = metric_sum(&metrics, "infera_router_identity_leases", &format!("identity=\"{identity}\""));
        assert_eq!(held, 1.0, "{identity}: {metrics}");
    }
    assert_eq!(metric_sum(&metrics, "infera_router_identity_leases", "identity=\"transport-only\""), 0.0);
    cluster.ledger_returns_to_zero().await.unwrap();
    cluster.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_rotated_on_sighup_keeps_the_proxy_routing_and_a_proxy_without_one_gets_no_lease() {
    let mut tokens = RouterTokens::new();
    let first = tokens.issue("proxy-a");
    let mut spec = ClusterSpec::new(MODEL, pd_sims());
    spec.processes = true;
    spec.sims_in_process = true;
    spec.proxies = 1;
    spec.control =
        ControlSpec::new(Workers::None).flags(["--decode-input-demand", "on"]).router_tokens(&tokens);
    spec.each_proxy = vec![first.proxy_flags()];
    let mut cluster = spec.start().await.expect("the cluster starts");
    let proxy = cluster.proxy_urls()[0].clone();
    traffic(&proxy).await;

    // A proxy that shows nothing holds no lease and is not ready; control counts the refusals.
    let bare = ProxySpec::new(cluster.control.url()).start().await.unwrap();
    eventually(Duration::from_secs(30), "control to refuse the proxy without a token", async || {
        let m = cluster.control.metrics().await.ok()?;
        (metric_sum(&m, "infera_control_router_unauthenticated_total", "reason=\"missing\"") > 0.0)
            .then_some(())
    })
    .await;
    assert_eq!(metric_sum(&bare.metrics().await.unwrap(), "infera_proxy_control_lease", ""), 0.0);
    assert_eq!(get(&format!("{}/readiness", bare.url)).await.0, http::StatusCode::SERVICE_UNAVAILABLE);

    // Rotation: control lists a second token of proxy-a's; the proxy's file gets it; the first
    // token goes. Each side reads its file on SIGHUP.
    let second = tokens.issue("proxy-a");
    cluster.control.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "control to read the new token list", async || {
        let m = cluster.control.metrics().await.ok()?;
        (metric_sum(&m, "infera_control_router_token_reloads_total", "outcome=\"ok\"") == 1.0).then_some(())
    })
    .await;
    std::fs::write(&first.file, format!("{}\n", second.token)).unwrap();
    let proxy_node = &mut cluster.proxies[0].node;
    proxy_node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the proxy to read its new token", async || {
        let m = get(&format!("{proxy}/metrics")).await.1;
        (metric_sum(&m, "infera_proxy_control_token_reloads_total", "outcome=\"ok\"") == 1.0).then_some(())
    })
    .await;
    tokens.revoke(&first);
    cluster.control.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "control to drop the old token", async || {
        let m = cluster.control.metrics().await.ok()?;
        (metric_sum(&m, "infera_control_router_token_reloads_total", "outcome=\"ok\"") == 2.0).then_some(())
    })
    .await;
    // The proxy keeps its lease and routes through control: no call of its was refused.
    let refused_before = metric_sum(
        &cluster.control.metrics().await.unwrap(),
        "infera_control_router_unauthenticated_total",
        "",
    );
    traffic(&proxy).await;
    let m = get(&format!("{proxy}/metrics")).await.1;
    assert_eq!(metric_sum(&m, "infera_proxy_control_lease", ""), 1.0);
    assert_eq!(fallbacks(&proxy).await, 0.0);
    let control_metrics = cluster.control.metrics().await.unwrap();
    let refused = metric_sum(&control_metrics, "infera_control_router_unauthenticated_total", "");
    let bare_refusals = refused - refused_before;
    assert!(
        metric_sum(
            &control_metrics,
            "infera_control_router_unauthenticated_total",
            "reason=\"unknown_token\""
        ) == 0.0,
        "the rotated proxy was never refused ({bare_refusals} refusals of the bare proxy since)"
    );
    assert_eq!(metric_sum(&control_metrics, "infera_router_identity_leases", "identity=\"proxy-a\""), 1.0);
    drop(bare);
    cluster.ledger_returns_to_zero().await.unwrap();
    cluster.stop().await.unwrap();
}

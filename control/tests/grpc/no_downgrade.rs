//! No TLS downgrade: a replica that serves TLS never forwards an Admin call to a leader that
//! advertises a plain `http://` URL, and a proxy that reaches control over TLS never follows one
//! named in `NOT_LEADER` — whatever the leader key says (a leader misconfigured, or an etcd
//! someone else writes to).

use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb;
use infera_testkit::EtcdServer;
use infera_testkit::tls::TestCa;
use infera_testkit::{ControlSpec, ProxySpec, Workers};
use tonic::Code;

use crate::harness::*;

/// Where the leader says it is: plain text, although it serves TLS.
const PLAINTEXT: &str = "http://127.0.0.1:9";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_nothing_is_sent_to_a_leader_named_at_a_plain_text_url() {
    let ca = TestCa::new("replicas");
    let server = ca.issue("control", &["127.0.0.1"]);
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let peer_ca = ca.ca().display().to_string();
    let flags = ["--etcd", url.as_str(), "--engine-poll-ms", "0", "--tls-peer-ca", peer_ca.as_str()];
    let leader = ControlSpec::new(Workers::None)
        .tls(&ca, &server)
        .flags(flags)
        .flags(["--advertise-url", PLAINTEXT])
        .start()
        .await
        .unwrap();
    infera_testkit::poll(Duration::from_secs(30), "the first replica to lead", async || {
        let config = leader.admin().await.get_config(pb::GetConfigRequest {}).await.ok()?.into_inner();
        config.leadership.filter(|l| l.role == "leader" && l.url == PLAINTEXT).map(|_| ())
    })
    .await
    .unwrap();
    let follower = ControlSpec::new(Workers::None).tls(&ca, &server).flags(flags).start().await.unwrap();

    // The follower refuses to forward (once it knows the leader; before, it answers reads itself).
    let mut admin = follower.admin().await;
    let err =
        infera_testkit::poll(Duration::from_secs(30), "the follower to refuse forwarding", async || {
            admin.clone().get_config(pb::GetConfigRequest {}).await.err()
        })
        .await
        .unwrap();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(StatusReason::of(&err).known(), Some(ErrorReason::PlaintextLeader), "{err:?}");
    assert!(err.message().contains(PLAINTEXT), "{err:?}");
    let set = pb::SetDecodeRequestWeightRequest { decode_request_weight: 0.0, auto: false };
    let err = admin.set_decode_request_weight(with_token(set, "an-operators-token")).await.unwrap_err();
    assert_eq!(StatusReason::of(&err).known(), Some(ErrorReason::PlaintextLeader), "{err:?}");
    let refused =
        sample(&follower.metrics().await.unwrap(), "infera_control_plaintext_leaders_refused_total");
    assert!(refused.unwrap_or(0.0) >= 2.0, "{refused:?}");

    // A proxy given only the follower's https:// URL hears NOT_LEADER naming the plain-text leader
    // and does not follow it: no lease, and the refusal counted.
    let proxy = ProxySpec::new(follower.url()).control_tls(&ca, None).start().await.unwrap();
    let refused =
        infera_testkit::poll(Duration::from_secs(30), "the proxy to refuse the leader", async || {
            let text = proxy.metrics().await.ok()?;
            let n = infera_testkit::http::metric_sum(
                &text,
                "infera_proxy_control_plaintext_leaders_refused_total",
                "",
            );
            (n >= 1.0).then_some(text)
        })
        .await
        .unwrap();
    assert_eq!(infera_testkit::http::metric_sum(&refused, "infera_proxy_control_lease", ""), 0.0);
    let leases = sample(&leader.metrics().await.unwrap(), "infera_router_leases");
    assert_eq!(leases, Some(0.0), "nothing reached the leader");
    drop(proxy);
}

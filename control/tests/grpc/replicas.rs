//! Two replicas on one etcd: one leads and books; the other refuses Router calls naming the
//! leader, forwards Admin calls to it, and takes over — with the persisted settings and an empty
//! ledger of a later term — when the leader stops; the proxy's re-declared leg is booked there.

use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, ReleaseReason};
use infera_proto::types::WorkerRecord;
use infera_registry::Registration;
use infera_testkit::EtcdServer;
use infera_testkit::{ControlSpec, Workers};
use tonic::Code;

use crate::harness::*;

fn not_leader(status: &tonic::Status) -> Option<String> {
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(StatusReason::of(status).known(), Some(ErrorReason::NotLeader), "{status:?}");
    StatusReason::leader(status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_names_the_leader_forwards_admin_and_takes_over_warm_from_a_redeclare() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let record = WorkerRecord::decode("decode-0", "http://stub", "m", 2).with_page_size(64);
    let engines = infera_testkit::EngineStubs::start_records([record]).await.unwrap();
    let _reg =
        Registration::start(vec![url.clone()], engines.worker_records().remove(0), Duration::from_secs(10));
    let flags = ["--etcd", url.as_str(), "--decode-input-demand", "on", "--engine-poll-ms", "0"];
    let leader = Control::start_with(&flags).await;
    let follower = Control(ControlSpec::new(Workers::None).flags(flags).start().await.unwrap(), None);

    // The follower books nothing and says who does.
    let mut f_router = follower.router().await;
    let open = pb::OpenLeaseRequest { holder: "proxy-a".into(), ttl_ms: 0 };
    // Until it has read the registry and the leader key it knows no leader; then it names it.
    let err = infera_testkit::poll(Duration::from_secs(10), "the follower to name the leader", async || {
        let err = f_router.clone().open_lease(open.clone()).await.unwrap_err();
        (not_leader(&err).as_deref() == Some(leader.url().as_str())).then_some(err)
    })
    .await
    .unwrap();
    assert_eq!(err.metadata().get("infera-leader").unwrap().to_str().unwrap(), leader.url());
    let err = f_router.pick_decode(pick("l-00000001-1", "m", 10)).await.unwrap_err();
    assert_eq!(not_leader(&err).as_deref(), Some(leader.url().as_str()));
    // A batch of releases is refused whole, as one release is: the proxy sends it to the leader.
    let releases = vec![release("r-00000001-1", ReleaseReason::Eof)];
    let err = f_router.release_many(pb::ReleaseManyRequest { releases }).await.unwrap_err();
    assert_eq!(not_leader(&err).as_deref(), Some(leader.url().as_str()));
    // It still lists the targets (a proxy's fallback list).
    eventually(Duration::from_secs(10), "the follower's view holds decode-0", || async {
        let rows = f_router.clone().list_targets(pb::ListTargetsRequest::default()).await.unwrap();
        rows.into_inner().targets.len() == 2
    })
    .await;

    // Admin through the follower reaches the leader (and etcd).
    let mut f_admin = follower.admin().await;
    let set = pb::SetDecodeRequestWeightRequest { decode_request_weight: 250_000.0, auto: false };
    let answered = f_admin.set_decode_request_weight(set).await.unwrap().into_inner();
    assert_eq!(answered.decode_request_weight, 250_000.0);
    assert_eq!(answered.leadership.as_ref().unwrap().url, leader.url(), "the leader answered");
    let config = leader.admin().await.get_config(pb::GetConfigRequest::default()).await.unwrap().into_inner();
    assert_eq!(config.decode_request_weight, 250_000.0);
    let term = config.leadership.unwrap();
    assert_eq!((term.role.as_str(), term.leader_url.as_str()), ("leader", leader.url().as_str()));
    let err = f_admin.watch_decisions(pb::WatchDecisionsRequest::default()).await.unwrap_err();
    assert_eq!(not_leader(&err).as_deref(), Some(leader.url().as_str()));

    // The leader books one decode leg for proxy-a, then stops (revoking its term at once).
    let lease = leader.lease(0).await;
    leader.wait_targets(2).await.unwrap();
    let picked = leader.router().await.pick_decode(pick(&lease, "m", 700)).await.unwrap().into_inner();
    // The leader keeps the proxies it has leases with in etcd: the next one waits for them.
    let book = "/infera/v1/control/proxies/test-proxy";
    let mut etcd_client = infera_registry::connect(&etcd.root()).await.unwrap();
    infera_testkit::poll(Duration::from_secs(10), "the leader to book test-proxy in etcd", async || {
        let got = etcd_client.get(book, None).await.ok()?;
        (!got.kvs().is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        picked.reservation_id.split('-').nth(1).map(|e| u32::from_str_radix(e, 16).unwrap()),
        Some(term.epoch)
    );
    leader.stop().await;
    follower.wait_leading().await.unwrap();

    // The new leader: the persisted W, a later term, an empty ledger until proxy-a re-declares.
    let config =
        follower.admin().await.get_config(pb::GetConfigRequest::default()).await.unwrap().into_inner();
    assert_eq!(config.decode_request_weight, 250_000.0, "read again at the takeover");
    let next = config.leadership.unwrap();
    assert!(next.epoch > term.epoch, "{next:?} after {term:?}");
    assert_eq!(held(&follower, "decode-0").await, [(0, 0), (0, 0)]);
    assert!(!next.warm, "test-proxy has not re-declared yet");
    let back = pb::OpenLeaseRequest { holder: "test-proxy".into(), ttl_ms: 0 };
    let lease = f_router.open_lease(back).await.unwrap().into_inner().lease_id;
    let leg = pb::DeclaredLeg {
        kind: pb::PickKind::Decode as i32,
        target: picked.target.clone(),
        model: "m".into(),
        request_id: "req-700".into(),
        input_tokens: 700,
        age_ms: 1_500,
        previous_reservation_id: picked.reservation_id.clone(),
    };
    let req = pb::RedeclareRequest { lease_id: lease.clone(), legs: vec![leg] };
    let results = f_router.redeclare(req).await.unwrap().into_inner().results;
    assert_eq!(results.len(), 1);
    assert!(!results[0].unknown_target);
    let rank = picked.target.as_ref().unwrap().dp_rank as usize;
    let mut expected = [(0, 0), (0, 0)];
    expected[rank] = (1, 700);
    assert_eq!(held(&follower, "decode-0").await, expected);
    let config =
        follower.admin().await.get_config(pb::GetConfigRequest::default()).await.unwrap().into_inner();
    assert!(config.leadership.unwrap().warm, "every proxy of the book is back");
    // The old id names nothing here; the new one ends the leg exactly once.
    let err = f_router.release(release(&picked.reservation_id, ReleaseReason::Eof)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let done = f_router.release(release(&results[0].reservation_id, ReleaseReason::Eof)).await.unwrap();
    assert!(!done.into_inner().already_released);
    assert_eq!(held(&follower, "decode-0").await, [(0, 0), (0, 0)]);

    let metrics = follower.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_leader_takeovers_total"), Some(1.0));
    assert_eq!(
        sample(&metrics, "infera_router_redeclared_total{kind=\"decode\",origin=\"control\"}"),
        Some(1.0)
    );
    assert!(sample(&metrics, "infera_router_not_leader_refusals_total{rpc=\"OpenLease\"}") >= Some(1.0));
}

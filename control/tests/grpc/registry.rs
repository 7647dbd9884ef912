//! Workers from a real etcd: registered → pickable; lease gone → not pickable.

use std::time::Duration;

use infera_proto::pb::{self, ReleaseReason};
use infera_proto::types::WorkerRecord;
use infera_registry::Registration;
use infera_testkit::EtcdServer;
use tonic::Code;

use infera_testkit::EngineStubs;

use crate::harness::*;

/// A decode worker of model `m` at page size 64, and the engine stub its record's URL names.
async fn decode(id: &str, ranks: u32) -> (EngineStubs, WorkerRecord) {
    let record = WorkerRecord::decode(id, "http://stub", "m", ranks).with_page_size(64);
    let engines = EngineStubs::start_records([record]).await.unwrap();
    let record = engines.worker_records().remove(0);
    (engines, record)
}

async fn decode_targets(control: &Control) -> usize {
    let req = pb::ListTargetsRequest { model: "m".into(), role: pb::Role::Decode as i32 };
    control.admin().await.list_targets(req).await.unwrap().into_inner().targets.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_registered_in_etcd_are_picked_until_their_lease_ends() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let control = Control::start_with(&["--etcd", &url, "--decode-input-demand", "on"]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let err = router.pick_decode(pick(&lease, "m", 10)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "nothing registered yet");

    let (_engines, record) = decode("decode-0", 4).await;
    let reg = Registration::start(vec![url.clone()], record, Duration::from_secs(2));
    eventually(Duration::from_secs(10), "decode-0's 4 ranks are targets", || async {
        decode_targets(&control).await == 4
    })
    .await;
    let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(target_of(&p).0, "decode-0");

    // The registrar dies: at lease expiry the worker leaves; its booking is still released.
    drop(reg);
    eventually(Duration::from_secs(10), "decode-0 left with its lease", || async {
        decode_targets(&control).await == 0
    })
    .await;
    let err = router.pick_decode(pick(&lease, "m", 10)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    router.release(release(&p.reservation_id, ReleaseReason::TargetRemoved)).await.unwrap();
    let res = control.admin().await.list_reservations(pb::ListReservationsRequest::default()).await.unwrap();
    assert!(res.into_inner().reservations.is_empty());

    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_registry_changes_total{kind=\"upsert\"}"), Some(1.0));
    assert_eq!(sample(&metrics, "infera_router_registry_changes_total{kind=\"remove\"}"), Some(1.0));
    control.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_changes_persist_in_etcd_across_a_restart() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let first = Control::start_with(&["--etcd", &url]).await;
    let mut admin = first.admin().await;
    admin
        .set_decode_input_demand(pb::SetDecodeInputDemandRequest {
            decode_input_demand: pb::DecodeInputDemand::On as i32,
        })
        .await
        .unwrap();
    // A burst of changes: etcd must end with the last one, whatever order writes would finish in.
    for i in 1..=30 {
        let w = f64::from(i) * 6_000.0;
        admin
            .set_decode_request_weight(pb::SetDecodeRequestWeightRequest {
                decode_request_weight: w,
                auto: false,
            })
            .await
            .unwrap();
    }
    admin
        .set_prefill_overlap_credit(pb::SetPrefillOverlapCreditRequest { prefill_overlap_credit: 2.5 })
        .await
        .unwrap();
    let endpoints = etcd.root();
    eventually(Duration::from_secs(10), "the settings persisted", || {
        let endpoints = endpoints.clone();
        async move {
            let stored = infera_registry::config::load(&endpoints).await.unwrap_or_default();
            stored.get("decode_input_demand").map(String::as_str) == Some("on")
                && stored.get("decode_request_weight").map(String::as_str) == Some("180000")
                && stored.get("prefill_overlap_credit").map(String::as_str) == Some("2.5")
        }
    })
    .await;
    first.stop().await;

    // A new control started with the default flags (mode off, W 0) takes the persisted values.
    let second = Control::start_with(&["--etcd", &url]).await;
    let cfg = second.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(cfg.decode_input_demand, pb::DecodeInputDemand::On as i32);
    assert_eq!(cfg.decode_request_weight, 180_000.0);
    assert_eq!(cfg.prefill_overlap_credit, 2.5);
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drains_persist_in_etcd_and_apply_when_the_worker_registers_again() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let first = Control::start_with(&["--etcd", &url]).await;
    let (_engines, record) = decode("decode-0", 2).await;
    let reg = Registration::start(vec![url.clone()], record, Duration::from_secs(2));
    eventually(Duration::from_secs(10), "decode-0 registered", || async {
        decode_targets(&first).await == 2
    })
    .await;
    let drain =
        pb::DrainTargetRequest { worker_id: "decode-0".into(), dp_rank: Some(1), ..Default::default() };
    first.admin().await.drain_target(drain).await.unwrap();
    let endpoints = etcd.root();
    eventually(Duration::from_secs(10), "the drain persisted", || {
        let endpoints = endpoints.clone();
        async move {
            let stored = infera_registry::config::load(&endpoints).await.unwrap_or_default();
            stored.get("drained_targets").map(String::as_str) == Some("decode-0/1\n")
        }
    })
    .await;
    first.stop().await;

    // A new control reads the drain before etcd has told it about decode-0; the drain applies
    // when the worker arrives, and only to rank 1.
    let second = Control::start_with(&["--etcd", &url, "--decode-input-demand", "on"]).await;
    eventually(Duration::from_secs(10), "decode-0 known again", || async {
        decode_targets(&second).await == 2
    })
    .await;
    let req = pb::ListTargetsRequest { model: "m".into(), role: pb::Role::Decode as i32 };
    let targets = second.admin().await.list_targets(req).await.unwrap().into_inner().targets;
    let drained: Vec<(u32, bool)> =
        targets.iter().map(|t| (t.target.as_ref().unwrap().dp_rank, t.drained)).collect();
    assert_eq!(drained, vec![(0, false), (1, true)]);
    let lease = second.lease(0).await;
    let mut router = second.router().await;
    for _ in 0..4 {
        let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        assert_eq!(target_of(&p), ("decode-0".to_owned(), 0), "rank 1 stays drained");
        router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    }
    // Resuming is persisted too.
    let resume =
        pb::DrainTargetRequest { worker_id: "decode-0".into(), dp_rank: Some(1), ..Default::default() };
    second.admin().await.resume_target(resume).await.unwrap();
    eventually(Duration::from_secs(10), "the resume persisted", || {
        let endpoints = endpoints.clone();
        async move {
            let stored = infera_registry::config::load(&endpoints).await.unwrap_or_default();
            stored.get("drained_targets").map(String::as_str) == Some("")
        }
    })
    .await;
    drop(reg);
    second.stop().await;
}

/// A registrar's drain request: the worker's targets take no new picks (the other worker gets
/// them), ListTargets says `draining`, and control reports what the worker still holds, down to
/// 0 when its last request ends; the request goes with the registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registrars_drain_stops_new_picks_and_control_reports_the_holdings_to_zero() {
    use infera_registry::drain::{self, Drained};

    let etcd = EtcdServer::start();
    let url = etcd.url();
    let control = Control::start_with(&["--etcd", &url, "--decode-input-demand", "on"]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let (_a_engine, a) = decode("decode-a", 1).await;
    let (_b_engine, b) = decode("decode-b", 1).await;
    let reg_a = Registration::start(vec![url.clone()], a, Duration::from_secs(5));
    let _reg_b = Registration::start(vec![url.clone()], b, Duration::from_secs(5));
    eventually(Duration::from_secs(10), "both decodes are targets", || async {
        decode_targets(&control).await == 2
    })
    .await;
    // Two requests on each worker (the cheaper one is picked each time).
    let mut on_a = Vec::new();
    for _ in 0..4 {
        let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        if target_of(&p).0 == "decode-a" {
            on_a.push(p.reservation_id);
        }
    }
    assert_eq!(on_a.len(), 2, "the picks spread over both workers");

    let since = reg_a.drain().await.expect("registered");
    let etcd_config = etcd.root();
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(10);
    eventually(Duration::from_secs(10), "decode-a is draining", || async {
        let req = pb::ListTargetsRequest { model: "m".into(), role: pb::Role::Decode as i32 };
        let targets = control.admin().await.list_targets(req).await.unwrap().into_inner().targets;
        targets.iter().any(|t| t.draining && t.target.as_ref().unwrap().worker_id == "decode-a")
    })
    .await;
    // What it holds is reported; new picks all go to decode-b.
    let soon = tokio::time::Instant::now() + Duration::from_secs(1);
    assert_eq!(
        drain::wait_drained(&etcd_config, &a_id(), since, soon).await,
        Drained::Deadline { held: Some(2) }
    );
    for _ in 0..4 {
        let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        assert_eq!(target_of(&p).0, "decode-b", "a draining worker takes no new picks");
    }
    router.release(release(&on_a[0], ReleaseReason::Eof)).await.unwrap();
    let waiting = tokio::spawn({
        let etcd_config = etcd_config.clone();
        async move { drain::wait_drained(&etcd_config, &a_id(), since, deadline()).await }
    });
    router.release(release(&on_a[1], ReleaseReason::Eof)).await.unwrap();
    assert_eq!(waiting.await.unwrap(), Drained::Empty);
    // Deregistered: the request went with the lease, and the report with it.
    reg_a.stop().await;
    eventually(Duration::from_secs(10), "the report is gone with the request", || async {
        !etcd.infera_keys().await.keys().any(|k| k.starts_with("/infera/v1/drains/decode-a/"))
    })
    .await;
    control.stop().await;
}

fn a_id() -> infera_proto::types::WorkerId {
    infera_proto::types::WorkerId::new("decode-a")
}

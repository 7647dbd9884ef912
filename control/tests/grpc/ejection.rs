//! Outlier ejection over gRPC: a decode rank whose legs fail (as the proxy reports them) is
//! ejected for every caller, lets one probe through when its time is up, and is healthy again
//! after enough successful probes; legs failed for other reasons count for nothing; a pool whose
//! every rank is ejected is still routed.

use std::time::Duration;

use infera_proto::pb::{self, LegFailure, ReleaseReason};

use crate::harness::*;

const FLAGS: [&str; 10] = [
    "--decode-input-demand",
    "on",
    "--eject-after-failures",
    "3",
    "--eject-open-ms",
    "300",
    "--eject-close-after-successes",
    "2",
    "--engine-poll-ms",
    "0",
];

fn failed(id: &str, failure: LegFailure) -> pb::ReleaseRequest {
    pb::ReleaseRequest { failure: failure as i32, ..release(id, ReleaseReason::Failed) }
}

async fn health(control: &Control, rank: u32) -> (String, u32, u64) {
    let req = pb::ListTargetsRequest { model: "m".into(), role: pb::Role::Decode as i32 };
    let rows = control.admin().await.list_targets(req).await.unwrap().into_inner().targets;
    let r = rows.iter().find(|r| r.target.as_ref().unwrap().dp_rank == rank).unwrap();
    (r.health.clone(), r.consecutive_failures, r.ejected_for_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_rank_is_ejected_for_everyone_probed_and_readmitted() {
    let control = Control::start(&pd_workers(2), &FLAGS).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    // Rank 0's legs fail with 5xx; rank 1's succeed. After 3 failures rank 0 is out.
    let mut failures = 0;
    while failures < 3 {
        let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        if target_of(&p).1 == 0 {
            router.release(failed(&p.reservation_id, LegFailure::ServerError)).await.unwrap();
            failures += 1;
        } else {
            router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
        }
    }
    let (state, count, for_ms) = health(&control, 0).await;
    assert_eq!((state.as_str(), count), ("ejected", 3));
    assert!(for_ms > 0 && for_ms <= 300, "{for_ms}");
    // Another proxy's lease: it does not pick rank 0 either.
    let other = control.lease(0).await;
    for _ in 0..10 {
        let p = router.pick_decode(pick(&other, "m", 10)).await.unwrap().into_inner();
        assert_eq!(target_of(&p).1, 1, "an ejected rank takes no pick");
        assert!(!p.cost.as_ref().unwrap().probe);
        router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    }
    // Its time is up: one probe at a time reaches it (held, so rank 1 costs more meanwhile).
    let probe = eventually::poll(Duration::from_secs(5), "a probe to reach rank 0", async || {
        let p = router.clone().pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        if target_of(&p).1 == 0 {
            return Some(p);
        }
        router.clone().release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
        None
    })
    .await
    .unwrap();
    assert!(probe.cost.as_ref().unwrap().probe, "the pick is marked as the probe");
    assert_eq!(health(&control, 0).await.0, "probing");
    let second = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(target_of(&second).1, 1, "one probe at a time");
    router.release(release(&second.reservation_id, ReleaseReason::Eof)).await.unwrap();
    // A leg released FAILED without a kind (the other leg failed) says nothing of rank 0.
    router.release(release(&probe.reservation_id, ReleaseReason::Failed)).await.unwrap();
    assert_eq!(health(&control, 0).await.0, "probing");
    // Two successful probes, one after the other: healthy again.
    for _ in 0..2 {
        let p = eventually::poll(Duration::from_secs(5), "the next probe", async || {
            let p = router.clone().pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
            if target_of(&p).1 == 0 {
                return Some(p);
            }
            router.clone().release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
            None
        })
        .await
        .unwrap();
        router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    }
    assert_eq!(health(&control, 0).await, ("healthy".to_owned(), 0, 0));
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_ejections_total{cause=\"server_error\"}"), Some(1.0));
    assert_eq!(sample(&metrics, "infera_router_readmissions_total"), Some(1.0));
    assert_eq!(sample(&metrics, "infera_router_leg_failures_total{kind=\"server_error\"}"), Some(3.0));
    assert_eq!(held(&control, "d").await, [(0, 0), (0, 0)], "the ledger is back to zero");
    control.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_count_against_every_rank_of_the_worker() {
    let control = Control::start(&pd_workers(4), &FLAGS).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    // Three refused connections, whichever ranks they were picked on: the worker's one port is
    // closed, so all four ranks are out.
    for _ in 0..3 {
        let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        router.release(failed(&p.reservation_id, LegFailure::Connect)).await.unwrap();
    }
    for rank in 0..4 {
        assert_eq!(health(&control, rank).await.0, "ejected", "rank {rank}");
    }
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_ejections_total{cause=\"connect\"}"), Some(4.0));
    control.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_every_rank_is_ejected_is_still_routed() {
    let control = Control::start(&pd_workers(1), &FLAGS).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    for _ in 0..3 {
        let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        router.release(failed(&p.reservation_id, LegFailure::ServerError)).await.unwrap();
    }
    assert_eq!(health(&control, 0).await.0, "ejected");
    let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(target_of(&p), ("d".to_owned(), 0), "routing somewhere beats refusing");
    router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_ejection_bypassed_total"), Some(1.0));
    control.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_passes_by_the_targets_it_failed_on_unless_none_is_left() {
    let control = Control::start(&pd_workers(2), &["--decode-input-demand", "on"]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let first = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    let failed_on = first.target.clone().unwrap();
    router.release(failed(&first.reservation_id, LegFailure::Connect)).await.unwrap();
    for _ in 0..5 {
        let retry = pb::PickRequest { exclude: vec![failed_on.clone()], ..pick(&lease, "m", 10) };
        let p = router.pick_decode(retry).await.unwrap().into_inner();
        assert_ne!(p.target, Some(failed_on.clone()));
        router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    }
    let all = vec![
        pb::Target { worker_id: "d".into(), dp_rank: 0 },
        pb::Target { worker_id: "d".into(), dp_rank: 1 },
    ];
    let p = router.pick_decode(pb::PickRequest { exclude: all, ..pick(&lease, "m", 10) }).await.unwrap();
    router.release(release(&p.into_inner().reservation_id, ReleaseReason::Eof)).await.unwrap();
    let too_many = vec![failed_on; 65];
    let err =
        router.pick_decode(pb::PickRequest { exclude: too_many, ..pick(&lease, "m", 10) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    control.stop().await;
}

//! Bad gRPC input gets INVALID_ARGUMENT (or NOT_FOUND for unknown ids) and changes nothing.

use infera_proto::pb::{self, ReleaseReason};
use tonic::Code;

use crate::harness::*;

/// Everything an operator can see: the settings, every target of every role with its ledger
/// terms and drain flag, and every live reservation.
async fn snapshot(control: &Control) -> (pb::Config, pb::ListTargetsResponse, pb::ListReservationsResponse) {
    let mut admin = control.admin().await;
    let cfg = admin.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    let targets = admin.list_targets(pb::ListTargetsRequest::default()).await.unwrap().into_inner();
    let res = admin.list_reservations(pb::ListReservationsRequest::default()).await.unwrap().into_inner();
    (cfg, targets, res)
}

#[tokio::test]
async fn bad_values_are_invalid_arguments_and_change_nothing() {
    let control =
        Control::start(&pd_workers(2), &["--decode-input-demand", "shadow", "--decode-request-weight", "5"])
            .await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let mut admin = control.admin().await;
    let held_one = router.pick_decode(pick(&lease, "m", 40)).await.unwrap().into_inner();
    let held_prefill = router.pick_prefill(pick(&lease, "m", 30)).await.unwrap().into_inner();
    admin
        .drain_target(pb::DrainTargetRequest {
            worker_id: "x".into(),
            dp_rank: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = snapshot(&control).await;
    assert!(before.1.targets.iter().any(|t| t.drained) && before.2.reservations.len() == 2);

    for w in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e13] {
        let err = admin
            .set_decode_request_weight(pb::SetDecodeRequestWeightRequest {
                decode_request_weight: w,
                auto: false,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "W = {w}: {err:?}");
        assert!(err.message().contains("decode_request_weight"), "{}", err.message());
    }
    for c in [-1.0, f64::NAN, f64::INFINITY, 100.5] {
        let err = admin
            .set_prefill_overlap_credit(pb::SetPrefillOverlapCreditRequest { prefill_overlap_credit: c })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "credit = {c}: {err:?}");
        assert!(err.message().contains("prefill_overlap_credit"), "{}", err.message());
    }
    for mode in [0, 4, -1] {
        let err = admin
            .set_decode_input_demand(pb::SetDecodeInputDemandRequest { decode_input_demand: mode })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "mode {mode}");
    }

    let bad_picks = [
        (pb::PickRequest { lease_id: String::new(), ..pick(&lease, "m", 1) }, "lease_id"),
        (pick("not-a-lease", "m", 1), "lease_id"),
        (pick(&lease, "", 1), "model"),
        (pb::PickRequest { request_id: String::new(), ..pick(&lease, "m", 1) }, "request_id"),
        (pick(&lease, "m", (1 << 28) + 1), "input_tokens"),
        (pick(&lease, "m", u64::MAX), "input_tokens"),
    ];
    for (req, field) in bad_picks {
        for kind in ["decode", "prefill"] {
            let res = if kind == "decode" {
                router.pick_decode(req.clone()).await
            } else {
                router.pick_prefill(req.clone()).await
            };
            let err = res.unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{kind} {req:?}");
            assert!(err.message().contains(field), "{field}: {}", err.message());
        }
    }

    let bad_releases = [
        release("", ReleaseReason::Eof),
        release("r-1", ReleaseReason::Eof),
        release("l-00000001-1", ReleaseReason::Eof),
        release(&held_one.reservation_id, ReleaseReason::Unspecified),
        pb::ReleaseRequest { reservation_id: held_one.reservation_id.clone(), reason: 42, failure: 0 },
        // A failure kind with a reason other than FAILED, and an unknown kind.
        pb::ReleaseRequest {
            failure: pb::LegFailure::Connect as i32,
            ..release(&held_one.reservation_id, ReleaseReason::Eof)
        },
        pb::ReleaseRequest { failure: 99, ..release(&held_one.reservation_id, ReleaseReason::Failed) },
        release(&held_one.reservation_id, ReleaseReason::LeaseExpired),
    ];
    for req in bad_releases {
        let err = router.release(req.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{req:?}");
    }

    for role in [4, 99] {
        let err =
            admin.list_targets(pb::ListTargetsRequest { model: String::new(), role }).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }
    let err = admin
        .list_reservations(pb::ListReservationsRequest { lease_id: "x".into(), worker_id: String::new() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = admin
        .drain_target(pb::DrainTargetRequest { worker_id: " ".into(), dp_rank: None, ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    // Stopping a worker: whole workers only, never on resume, a known worker, and only with the
    // etcd its launcher reads (none behind this control).
    let stop = |worker_id: &str, dp_rank| pb::DrainTargetRequest {
        worker_id: worker_id.into(),
        dp_rank,
        stop_when_drained: true,
    };
    let err = admin.drain_target(stop("x", Some(1))).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let err = admin.resume_target(stop("x", None)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let err = admin.drain_target(stop("nope", None)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = admin.drain_target(stop("x", None)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("--etcd"), "{err:?}");
    let err =
        admin.watch_decisions(pb::WatchDecisionsRequest { kind: 9, model: String::new() }).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = router.keep_alive(pb::KeepAliveRequest { lease_id: "l-zz".into() }).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    assert_eq!(snapshot(&control).await, before, "nothing changed");
    let metrics = control.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            "infera_router_picks_total{kind=\"decode\",mode=\"shadow\",outcome=\"invalid_argument\"}"
        ),
        Some(6.0),
        "invalid picks are counted"
    );
    router.release(release(&held_one.reservation_id, ReleaseReason::Eof)).await.unwrap();
    router.release(release(&held_prefill.reservation_id, ReleaseReason::Eof)).await.unwrap();
    assert_eq!(held(&control, "d").await, vec![(0, 0); 2]);
    control.stop().await;
}

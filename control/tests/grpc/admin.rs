//! Admin: token, run-time W and mode, listing.

use infera_proto::pb::{self, DecodeInputDemand};
use tonic::Code;

use crate::harness::*;

#[tokio::test]
async fn admin_calls_need_the_token_and_router_calls_do_not() {
    let control = Control::start(&pd_workers(2), &["--admin-token", "let-me-in"]).await;
    let mut admin = control.admin().await;
    let err = admin.get_config(pb::GetConfigRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let err = admin.get_config(with_token(pb::GetConfigRequest {}, "wrong")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let err = admin
        .set_decode_request_weight(pb::SetDecodeRequestWeightRequest {
            decode_request_weight: 0.0,
            auto: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut watch = admin.clone();
    let err = watch.watch_decisions(pb::WatchDecisionsRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    admin.get_config(with_token(pb::GetConfigRequest {}, "let-me-in")).await.unwrap();
    // The proxies' service is not behind the token.
    let lease = control.lease(0).await;
    control.router().await.pick_decode(pick(&lease, "m", 1)).await.unwrap();
    control.stop().await;
}

#[tokio::test]
async fn the_overlap_credit_changes_at_run_time() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let mut admin = control.admin().await;
    let before = admin.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(before.prefill_overlap_credit, 8.0, "the default");
    let set = pb::SetPrefillOverlapCreditRequest { prefill_overlap_credit: 2.5 };
    let cfg = admin.set_prefill_overlap_credit(set).await.unwrap().into_inner();
    assert_eq!(cfg.prefill_overlap_credit, 2.5);
    assert_eq!(pb::Config { prefill_overlap_credit: 8.0, ..cfg.clone() }, before, "nothing else changed");
    assert_eq!(admin.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner(), cfg);
    control.stop().await;
}

#[tokio::test]
async fn weight_without_demand_is_rejected_at_run_time_and_changes_nothing() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let mut admin = control.admin().await;
    let cfg = admin.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(cfg.decode_input_demand, DecodeInputDemand::Off as i32);
    assert_eq!(cfg.decode_request_weight, 0.0);

    let set_w = |w: f64| pb::SetDecodeRequestWeightRequest { decode_request_weight: w, auto: false };
    let set_m = |m: DecodeInputDemand| pb::SetDecodeInputDemandRequest { decode_input_demand: m as i32 };
    let err = admin.set_decode_request_weight(set_w(1e6)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("shadow or on"), "{}", err.message());
    assert_eq!(admin.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner(), cfg);

    let cfg = admin.set_decode_input_demand(set_m(DecodeInputDemand::Shadow)).await.unwrap().into_inner();
    assert_eq!(cfg.decode_input_demand, DecodeInputDemand::Shadow as i32);
    let cfg = admin.set_decode_request_weight(set_w(1e6)).await.unwrap().into_inner();
    assert_eq!(cfg.decode_request_weight, 1e6);
    let err = admin.set_decode_input_demand(set_m(DecodeInputDemand::Off)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let now = admin.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    assert_eq!((now.decode_input_demand, now.decode_request_weight), (DecodeInputDemand::Shadow as i32, 1e6));

    // A run-time switch takes effect on the next pick.
    admin.set_decode_input_demand(set_m(DecodeInputDemand::On)).await.unwrap();
    let lease = control.lease(0).await;
    let p = control.router().await.pick_decode(pick(&lease, "m", 1)).await.unwrap().into_inner();
    assert_eq!(p.mode, DecodeInputDemand::On as i32);
    assert_eq!(p.cost.unwrap().request_weight, 1e6);
    control.stop().await;
}

#[tokio::test]
async fn reservations_are_listed_with_their_holder_and_filters() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let a = control.lease(0).await;
    let b = control.lease(0).await;
    let mut router = control.router().await;
    router.pick_decode(pick(&a, "m", 11)).await.unwrap();
    router.pick_prefill(pick(&a, "m", 12)).await.unwrap();
    router.pick_decode(pick(&b, "m", 13)).await.unwrap();
    let mut admin = control.admin().await;
    let all = admin.list_reservations(pb::ListReservationsRequest::default()).await.unwrap().into_inner();
    assert_eq!(all.reservations.len(), 3);
    assert_eq!(all.reservations[0].holder, "test-proxy");
    assert_eq!(all.reservations[1].kind, pb::PickKind::Prefill as i32);
    assert_eq!(all.reservations[1].input_tokens, 12);
    assert!(all.reservations[0].booked_at.is_some());
    let of_a = admin
        .list_reservations(pb::ListReservationsRequest { lease_id: a.clone(), worker_id: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(of_a.reservations.len(), 2);
    let on_p = admin
        .list_reservations(pb::ListReservationsRequest { lease_id: String::new(), worker_id: "p".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(on_p.reservations.len(), 1);
    let decode_only = admin
        .list_targets(pb::ListTargetsRequest { model: "m".into(), role: pb::Role::Decode as i32 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(decode_only.targets.len(), 2);
    assert_eq!(decode_only.targets.iter().map(|t| t.booked_input_tokens).sum::<u64>(), 24);
    assert_eq!(decode_only.targets[0].worker.as_ref().unwrap().url, control.url_of("d"));
    control.stop().await;
}

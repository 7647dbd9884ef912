//! Picking and booking over gRPC.

use std::collections::HashMap;

use futures_util::StreamExt;
use infera_proto::pb::{self, ReleaseReason};
use tonic::Code;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_picks_from_many_clients_never_overbook() {
    let control = Control::start(
        &pd_workers(8),
        &["--decode-input-demand", "on", "--decode-request-weight", "1000000000"],
    )
    .await;
    let lease = control.lease(0).await;
    let before = control.metrics().await;
    assert_eq!(
        sample(&before, "infera_router_decode_demand_requests{target=\"d/7\"}"),
        Some(0.0),
        "every target has its series from the start"
    );
    assert_eq!(
        sample(&before, "infera_router_releases_total{kind=\"decode\",reason=\"target_removed\"}"),
        Some(0.0)
    );
    // 8 clients on their own connections, 100 picks each, all in flight at once.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = control.router().await;
        for _ in 0..100 {
            let (mut client, lease) = (client.clone(), lease.clone());
            tasks.push(tokio::spawn(async move {
                client.pick_decode(pick(&lease, "m", 1_000)).await.unwrap().into_inner()
            }));
        }
    }
    let mut picked = Vec::new();
    for t in tasks {
        picked.push(t.await.unwrap());
    }
    let mut per_rank: HashMap<u32, u32> = HashMap::new();
    for p in &picked {
        *per_rank.entry(target_of(p).1).or_default() += 1;
    }
    assert_eq!(per_rank.len(), 8);
    assert!(per_rank.values().all(|n| *n == 100), "{per_rank:?}");
    assert_eq!(held(&control, "d").await, vec![(100, 100_000); 8]);
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_decode_demand_requests{target=\"d/5\"}"), Some(100.0));
    assert_eq!(sample(&metrics, "infera_router_decode_demand_tokens{target=\"d/5\"}"), Some(100_000.0));
    assert_eq!(
        sample(&metrics, "infera_router_picks_total{kind=\"decode\",mode=\"on\",outcome=\"ok\"}"),
        Some(800.0)
    );
    // Every pick's time inside control is in the latency histogram.
    assert_eq!(sample(&metrics, "infera_router_pick_duration_seconds_count{kind=\"decode\"}"), Some(800.0));
    let in_the_buckets =
        sample(&metrics, "infera_router_pick_duration_seconds_bucket{le=\"+Inf\",kind=\"decode\"}");
    assert_eq!(in_the_buckets, Some(800.0));

    // Release all of them concurrently: the ledger is back to exactly zero.
    let client = control.router().await;
    let releases: Vec<_> = picked
        .iter()
        .map(|p| {
            let (mut client, id) = (client.clone(), p.reservation_id.clone());
            tokio::spawn(async move {
                client.release(release(&id, ReleaseReason::Eof)).await.unwrap().into_inner()
            })
        })
        .collect();
    for r in releases {
        assert!(!r.await.unwrap().already_released);
    }
    assert_eq!(held(&control, "d").await, vec![(0, 0); 8]);
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_decode_demand_requests{target=\"d/5\"}"), Some(0.0));
    assert_eq!(sample(&metrics, "infera_router_releases_total{kind=\"decode\",reason=\"eof\"}"), Some(800.0));
    control.stop().await;
}

/// Books one long request, then six short ones; returns where the short ones went relative
/// to the long one ('L' same rank, 'O' the other).
async fn shorts_after_a_long_one(control: &Control, lease: &str) -> String {
    let mut router = control.router().await;
    let long = router.pick_decode(pick(lease, "m", 100_000)).await.unwrap().into_inner();
    let mut out = String::new();
    let mut ids = vec![long.reservation_id.clone()];
    for _ in 0..6 {
        let p = router.pick_decode(pick(lease, "m", 10_000)).await.unwrap().into_inner();
        out.push(if target_of(&p) == target_of(&long) { 'L' } else { 'O' });
        ids.push(p.reservation_id);
    }
    for id in ids {
        router.release(release(&id, ReleaseReason::Eof)).await.unwrap();
    }
    out
}

#[tokio::test]
async fn weight_changes_the_cost_ordering_on_a_crafted_ledger() {
    let control = Control::start(&pd_workers(2), &["--decode-input-demand", "on"]).await;
    let lease = control.lease(0).await;
    assert_eq!(shorts_after_a_long_one(&control, &lease).await, "OOOOOO", "W = 0: token-only demand");

    let mut admin = control.admin().await;
    let cfg = admin
        .set_decode_request_weight(pb::SetDecodeRequestWeightRequest {
            decode_request_weight: 50_000.0,
            auto: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cfg.decode_request_weight, 50_000.0);
    // The next pick already uses W (see the unit test for the arithmetic).
    assert_eq!(shorts_after_a_long_one(&control, &lease).await, "OOOLOL");

    // The response carries the chosen target's terms before the booking.
    let mut router = control.router().await;
    let a = router.pick_decode(pick(&lease, "m", 700)).await.unwrap().into_inner();
    let b = router.pick_decode(pick(&lease, "m", 300)).await.unwrap().into_inner();
    let c = router.pick_decode(pick(&lease, "m", 200)).await.unwrap().into_inner();
    let cost = c.cost.clone().unwrap();
    assert_eq!((cost.held_requests, cost.booked_input_tokens, cost.request_tokens), (1, 300, 200));
    assert_eq!(cost.request_weight, 50_000.0);
    assert_eq!(cost.cost, 300.0 + 200.0 + 50_000.0);
    assert_eq!(target_of(&c), target_of(&b));
    assert_ne!(target_of(&a), target_of(&b));
    control.stop().await;
}

#[tokio::test]
async fn shadow_keeps_the_legacy_pick_and_streams_the_weighted_suggestion() {
    let control = Control::start(
        &pd_workers(4),
        &[
            "--decode-input-demand",
            "shadow",
            "--decode-request-weight",
            "1000000",
            "--decode-policy",
            "round-robin",
        ],
    )
    .await;
    let lease = control.lease(0).await;
    let mut admin = control.admin().await;
    let mut events = admin
        .watch_decisions(pb::WatchDecisionsRequest { kind: pb::PickKind::Decode as i32, model: "m".into() })
        .await
        .unwrap()
        .into_inner();
    let mut router = control.router().await;
    let mut picks = Vec::new();
    for _ in 0..8 {
        picks.push(router.pick_decode(pick(&lease, "m", 1_000)).await.unwrap().into_inner());
    }
    assert_eq!(picks.iter().map(|p| target_of(p).1).collect::<Vec<_>>(), [0, 1, 2, 3, 0, 1, 2, 3]);
    for p in picks.iter().filter(|p| target_of(p).1 == 3) {
        router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    }
    let p = router.pick_decode(pick(&lease, "m", 1_000)).await.unwrap().into_inner();
    assert_eq!(target_of(&p).1, 0, "round-robin still selects");
    assert_eq!(p.mode, pb::DecodeInputDemand::Shadow as i32);

    let mut last = None;
    for _ in 0..9 {
        last = Some(events.next().await.unwrap().unwrap());
    }
    let e = last.unwrap();
    assert_eq!(e.reservation_id, p.reservation_id);
    assert_eq!(e.chosen.as_ref().unwrap().dp_rank, 0);
    assert_eq!(e.suggested.as_ref().unwrap().dp_rank, 3);
    assert!(!e.agree);
    assert_eq!(e.request_weight, 1e6);
    let terms: Vec<(u32, u64, f64)> =
        e.candidates.iter().map(|c| (c.target.as_ref().unwrap().dp_rank, c.held_requests, c.cost)).collect();
    assert_eq!(terms, [(0, 2, 2_003_000.0), (1, 2, 2_003_000.0), (2, 2, 2_003_000.0), (3, 0, 1_000.0)]);
    let metrics = control.metrics().await;
    assert_eq!(
        sample(&metrics, "infera_router_decode_shadow_decisions_total{agreement=\"disagree\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "infera_router_decode_shadow_decisions_total{agreement=\"agree\"}"),
        Some(8.0)
    );
    control.stop().await;
}

#[tokio::test]
async fn drained_targets_take_no_picks_until_resumed() {
    let control = Control::start(&pd_workers(3), &["--decode-input-demand", "on"]).await;
    let lease = control.lease(0).await;
    let mut admin = control.admin().await;
    let drained = admin
        .drain_target(pb::DrainTargetRequest {
            worker_id: "d".into(),
            dp_rank: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(drained.targets.len(), 1);
    assert!(drained.targets[0].drained);
    let mut router = control.router().await;
    for _ in 0..12 {
        let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        assert_ne!(target_of(&p).1, 1);
    }
    admin
        .drain_target(pb::DrainTargetRequest { worker_id: "d".into(), dp_rank: None, ..Default::default() })
        .await
        .unwrap();
    let err = router.pick_decode(pick(&lease, "m", 10)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    admin
        .resume_target(pb::DrainTargetRequest {
            worker_id: "d".into(),
            dp_rank: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let p = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(target_of(&p).1, 1);
    let unknown = admin
        .drain_target(pb::DrainTargetRequest {
            worker_id: "nope".into(),
            dp_rank: None,
            ..Default::default()
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);
    control.stop().await;
}

#[tokio::test]
async fn release_is_idempotent_and_unknown_ids_are_not_found() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let keep = router.pick_decode(pick(&lease, "m", 5)).await.unwrap().into_inner();
    let p = router.pick_prefill(pick(&lease, "m", 7)).await.unwrap().into_inner();
    assert_eq!(p.worker.as_ref().unwrap().bootstrap_port, 8998);
    let first = router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap().into_inner();
    let second =
        router.release(release(&p.reservation_id, ReleaseReason::Failed)).await.unwrap().into_inner();
    assert!(!first.already_released);
    assert!(second.already_released);
    // Never issued by this control (a later sequence; another epoch; its own sequence and epoch
    // without the tag, or with another's).
    let parts: Vec<&str> = p.reservation_id.strip_prefix("r-").unwrap().split('-').collect();
    let [epoch, seq, tag] = parts[..] else { panic!("{}", p.reservation_id) };
    let later = seq.parse::<u64>().unwrap() + 100;
    for id in [
        format!("r-{epoch}-{later}-{tag}"),
        format!("r-00000000-1-{tag}"),
        format!("r-{epoch}-{seq}"),
        format!(
            "r-{epoch}-{seq}-{}",
            if tag == "0000000000000001" { "0000000000000002" } else { "0000000000000001" }
        ),
    ] {
        let err = router.release(release(&id, ReleaseReason::Eof)).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{id}: {err:?}");
    }
    assert_eq!(
        held(&control, "d").await.iter().map(|h| h.0).sum::<u64>(),
        1,
        "the other reservation is intact"
    );
    router.release(release(&keep.reservation_id, ReleaseReason::Cancelled)).await.unwrap();
    assert_eq!(held(&control, "d").await, vec![(0, 0); 2]);
    assert_eq!(held(&control, "p").await, vec![(0, 0); 2]);
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_repeated_releases_total"), Some(1.0));
    control.stop().await;
}

#[tokio::test]
async fn picks_are_per_model_and_aggregated_models_pick_from_mixed_workers() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let agg = router.pick_decode(pick(&lease, "agg", 5)).await.unwrap().into_inner();
    assert_eq!(target_of(&agg).0, "x");
    assert_eq!(agg.worker.as_ref().unwrap().role, pb::Role::Mixed as i32);
    let err = router.pick_prefill(pick(&lease, "agg", 5)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let err = router.pick_decode(pick(&lease, "unknown-model", 5)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(err.message(), "unknown model \"unknown-model\"");
    let listed = router
        .list_targets(pb::ListTargetsRequest { model: "agg".into(), role: 0 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.targets.len(), 2);
    assert_eq!(listed.targets[0].held_requests + listed.targets[1].held_requests, 1);
    control.stop().await;
}

#[tokio::test]
async fn release_many_answers_each_release_as_release_would_and_the_ledger_returns_to_zero() {
    use pb::ReleaseOutcome as O;
    let control = Control::start(&pd_workers(2), &[]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let mut ids = Vec::new();
    for tokens in [5, 6, 7] {
        ids.push(router.pick_decode(pick(&lease, "m", tokens)).await.unwrap().into_inner().reservation_id);
    }
    let ended = router.pick_prefill(pick(&lease, "m", 9)).await.unwrap().into_inner().reservation_id;
    router.release(release(&ended, ReleaseReason::Eof)).await.unwrap();
    assert_eq!(held(&control, "d").await.iter().map(|h| h.0).sum::<u64>(), 3);

    let (epoch, _) = ended.strip_prefix("r-").unwrap().split_once('-').unwrap();
    let failed = pb::ReleaseRequest {
        reservation_id: ids[1].clone(),
        reason: ReleaseReason::Failed as i32,
        failure: pb::LegFailure::StreamCut as i32,
    };
    let releases = vec![
        release(&ids[0], ReleaseReason::Eof),
        failed,
        release(&ended, ReleaseReason::Eof),
        release(&format!("r-{epoch}-999999"), ReleaseReason::Eof),
        release("not-an-id", ReleaseReason::Eof),
        // FAILED's failure kind on an EOF: malformed, whatever its reservation.
        pb::ReleaseRequest {
            failure: pb::LegFailure::Timeout as i32,
            ..release(&ids[2], ReleaseReason::Eof)
        },
        release(&ids[2], ReleaseReason::Cancelled),
        release(&ids[0], ReleaseReason::Eof),
    ];
    let answer = router.release_many(pb::ReleaseManyRequest { releases }).await.unwrap().into_inner();
    let expected = [
        O::Released,
        O::Released,
        O::AlreadyReleased,
        O::UnknownReservation,
        O::Invalid,
        O::Invalid,
        O::Released,
        O::AlreadyReleased,
    ];
    assert_eq!(answer.outcomes, expected.map(|o| o as i32).to_vec());
    assert_eq!(held(&control, "d").await.iter().map(|h| h.0).sum::<u64>(), 0);
    assert_eq!(held(&control, "p").await.iter().map(|h| h.0).sum::<u64>(), 0);
    let m = control.metrics().await;
    assert_eq!(sample(&m, "infera_router_releases_total{kind=\"decode\",reason=\"cancelled\"}"), Some(1.0));

    // An empty call is fine; more than 4,096 releases is refused whole, naming the field.
    let empty = router.release_many(pb::ReleaseManyRequest::default()).await.unwrap().into_inner();
    assert!(empty.outcomes.is_empty());
    let releases = vec![release(&ids[0], ReleaseReason::Eof); 4097];
    let err = router.release_many(pb::ReleaseManyRequest { releases }).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("releases"), "{}", err.message());
    control.stop().await;
}

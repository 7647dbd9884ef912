//! The prefill phase of held decode requests: a decode reservation whose request still holds a
//! prefill reservation (same request id) is "prefilling" until that prefill ends; ListTargets
//! and the decision events show it, and `--decode-prefilling-weight` weighs it in the cost
//! (`--decode-prefilling-age-decay on`: by its age against the measured prefill phases).

use futures_util::StreamExt;
use infera_proto::pb::{self, ReleaseReason};

use crate::harness::*;

fn pick_for(lease: &str, request: &str, tokens: u64) -> pb::PickRequest {
    pb::PickRequest { request_id: request.into(), ..pick(lease, "m", tokens) }
}

async fn prefilling(control: &Control) -> Vec<u64> {
    let req = pb::ListTargetsRequest { role: pb::Role::Decode as i32, ..Default::default() };
    let rows = control.admin().await.list_targets(req).await.unwrap().into_inner().targets;
    rows.iter().map(|r| r.prefilling_requests).collect()
}

async fn watch_decode(control: &Control) -> tonic::Streaming<pb::DecisionEvent> {
    let req = pb::WatchDecisionsRequest { kind: pb::PickKind::Decode as i32, ..Default::default() };
    control.admin().await.watch_decisions(req).await.unwrap().into_inner()
}

#[tokio::test]
async fn a_decode_is_prefilling_until_its_prefill_ends() {
    let control = Control::start(&pd_workers(2), &["--decode-input-demand", "on"]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let p = router.pick_prefill(pick_for(&lease, "a", 1_000)).await.unwrap().into_inner();
    let d = router.pick_decode(pick_for(&lease, "a", 1_000)).await.unwrap().into_inner();
    let rank = target_of(&d).1 as usize;
    let marked = prefilling(&control).await;
    assert_eq!(marked.iter().sum::<u64>(), 1);
    assert_eq!(marked[rank], 1, "{marked:?}");
    router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    assert_eq!(prefilling(&control).await, vec![0, 0], "the prefill ended: its request decodes");
    router.release(release(&d.reservation_id, ReleaseReason::Eof)).await.unwrap();
    assert_eq!(held(&control, "d").await, vec![(0, 0); 2]);
    control.stop().await;
}

#[tokio::test]
async fn weight_zero_counts_only_what_is_past_prefill() {
    let flags = [
        "--decode-input-demand",
        "on",
        "--decode-request-weight",
        "1000000",
        "--decode-prefilling-weight",
        "0",
    ];
    let control = Control::start(&pd_workers(2), &flags).await;
    let config = control.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(config.decode_prefilling_weight, 0.0);
    assert!(config.decode_prefilling_age_decay, "the decay is on by default");
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    // Request a is still in prefill; request b is past it. Each lands on its own rank.
    let _pa = router.pick_prefill(pick_for(&lease, "a", 100)).await.unwrap().into_inner();
    let da = router.pick_decode(pick_for(&lease, "a", 100)).await.unwrap().into_inner();
    let db = router.pick_decode(pick_for(&lease, "b", 100)).await.unwrap().into_inner();
    assert_ne!(target_of(&da).1, target_of(&db).1, "the second pick avoids the first's rank");
    let mut watch = watch_decode(&control).await;
    // A new request: a's rank holds one request still in prefill, b's one past it.
    let dc = router.pick_decode(pick_for(&lease, "c", 100)).await.unwrap().into_inner();
    assert_eq!(target_of(&dc).1, target_of(&da).1, "at weight 0 the prefilling request costs nothing");
    let event = watch.next().await.unwrap().unwrap();
    let on_a =
        event.candidates.iter().find(|c| c.target.as_ref().unwrap().dp_rank == target_of(&da).1).unwrap();
    assert_eq!((on_a.held_requests, on_a.prefilling_requests, on_a.prefilling_tokens), (1, 1, 100));
    assert_eq!(on_a.cost, 100.0, "request tokens only: the held one is still in prefill");
    control.stop().await;
}

#[tokio::test]
async fn bad_weights_do_not_start() {
    for bad in ["-1", "4.5", "nan", "much"] {
        let argv = ["infera-control", "--workers", "w.toml", "--decode-prefilling-weight", bad];
        assert!(<infera_control::Args as clap::Parser>::try_parse_from(argv).is_err(), "{bad} accepted");
    }
    let argv = ["infera-control", "--workers", "w.toml", "--decode-prefilling-age-decay", "maybe"];
    assert!(<infera_control::Args as clap::Parser>::try_parse_from(argv).is_err());
}

const MEDIAN: &str = "infera_router_prefill_phase_median_seconds{model=\"m\"}";

#[tokio::test]
async fn the_age_decay_measures_prefill_phases_and_shows_the_weighted_prefilling() {
    let flags = ["--decode-input-demand", "on"];
    let control = Control::start(&pd_workers(2), &flags).await;
    let config = control.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    assert!(config.decode_prefilling_age_decay);
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    // A cancelled prefill is no phase; one that reached its EOF is.
    let cancelled = router.pick_prefill(pick_for(&lease, "a", 100)).await.unwrap().into_inner();
    router.release(release(&cancelled.reservation_id, ReleaseReason::Cancelled)).await.unwrap();
    assert_eq!(sample(&control.metrics().await, MEDIAN), None);
    let done = router.pick_prefill(pick_for(&lease, "b", 100)).await.unwrap().into_inner();
    router.release(release(&done.reservation_id, ReleaseReason::Eof)).await.unwrap();
    let median = sample(&control.metrics().await, MEDIAN).expect("one phase measured");
    assert!((0.0..10.0).contains(&median), "{median}");
    // Request c is still in prefill on its decode rank; the next pick sees it weighted by age.
    let _pc = router.pick_prefill(pick_for(&lease, "c", 100)).await.unwrap().into_inner();
    let dc = router.pick_decode(pick_for(&lease, "c", 100)).await.unwrap().into_inner();
    let mut watch = watch_decode(&control).await;
    router.pick_decode(pick_for(&lease, "d", 100)).await.unwrap();
    let event = watch.next().await.unwrap().unwrap();
    let on_c =
        event.candidates.iter().find(|c| c.target.as_ref().unwrap().dp_rank == target_of(&dc).1).unwrap();
    assert_eq!(on_c.prefilling_requests, 1);
    let w = on_c.prefilling_weighted;
    assert!(w > 0.0 && w <= 1.0, "one request weighed by min(1, median / age): {w}");
    assert!((on_c.prefilling_weighted_tokens - 100.0 * w).abs() < 1e-9, "{on_c:?}");
    let other = event.candidates.iter().find(|c| c.target != on_c.target).unwrap();
    assert_eq!((other.prefilling_weighted, other.prefilling_weighted_tokens), (0.0, 0.0));
    control.stop().await;
}

//! PickMany: several picks in one call, each answered as its unary call would be.

use infera_proto::error::{ErrorReason, StatusReason, status_of_failure};
use infera_proto::pb::{self, ReleaseReason, pick_result::Outcome};
use tonic::Code;

use crate::harness::*;

const FLAGS: &[&str] = &["--decode-input-demand", "on", "--decode-request-weight", "1000"];

fn item(kind: pb::PickKind, pick: pb::PickRequest) -> pb::PickItem {
    pb::PickItem { kind: kind as i32, pick: Some(pick), trace_context: Default::default() }
}

/// A decode and a prefill pick per token count: what a proxy asks for a burst of PD requests.
fn burst(lease: &str) -> Vec<(pb::PickKind, pb::PickRequest)> {
    [900, 40, 3_000, 40, 700, 5]
        .into_iter()
        .flat_map(|tokens| {
            [pb::PickKind::Prefill, pb::PickKind::Decode].map(|kind| (kind, pick(lease, "m", tokens)))
        })
        .collect()
}

#[tokio::test]
async fn a_pick_many_books_exactly_what_the_unary_calls_in_its_order_would() {
    // Two controls of the same seed: one picks the burst one call at a time, the other in one
    // PickMany. Each pick sees what the ones before it booked, so the targets are the same.
    let unary = Control::start(&pd_workers(4), FLAGS).await;
    let lease = unary.lease(0).await;
    let mut router = unary.router().await;
    let mut one_by_one = Vec::new();
    for (kind, pick) in burst(&lease) {
        let answer = match kind {
            pb::PickKind::Prefill => router.pick_prefill(pick).await,
            _ => router.pick_decode(pick).await,
        };
        one_by_one.push(target_of(&answer.unwrap().into_inner()));
    }
    let unary_held = held(&unary, "d").await;

    let batched = Control::start(&pd_workers(4), FLAGS).await;
    let lease = batched.lease(0).await;
    let mut router = batched.router().await;
    let picks = burst(&lease).into_iter().map(|(kind, pick)| item(kind, pick)).collect();
    let answer = router.pick_many(pb::PickManyRequest { picks }).await.unwrap().into_inner();
    let picked: Vec<pb::PickResponse> = answer
        .results
        .into_iter()
        .map(|r| match r.outcome {
            Some(Outcome::Picked(p)) => p,
            other => panic!("a pick failed: {other:?}"),
        })
        .collect();
    assert_eq!(picked.iter().map(target_of).collect::<Vec<_>>(), one_by_one);
    assert!(one_by_one.iter().any(|t| t.1 != one_by_one[1].1), "the burst spreads: {one_by_one:?}");
    assert_eq!(held(&batched, "d").await, unary_held);
    let m = batched.metrics().await;
    assert_eq!(
        sample(&m, "infera_router_picks_total{kind=\"decode\",mode=\"on\",outcome=\"ok\"}"),
        Some(6.0)
    );

    // Released together, the ledger is back at zero.
    let releases = picked.iter().map(|p| release(&p.reservation_id, ReleaseReason::Eof)).collect();
    router.release_many(pb::ReleaseManyRequest { releases }).await.unwrap();
    assert!(held(&batched, "d").await.iter().chain(&held(&batched, "p").await).all(|h| *h == (0, 0)));
    unary.stop().await;
    batched.stop().await;
}

#[tokio::test]
async fn a_bad_pick_fails_alone_with_the_status_its_unary_call_would_end_with() {
    let control = Control::start(&pd_workers(2), FLAGS).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let picks = vec![
        item(pb::PickKind::Decode, pick(&lease, "m", 10)),
        item(pb::PickKind::Decode, pick(&lease, "no-such-model", 10)),
        item(pb::PickKind::Unspecified, pick(&lease, "m", 10)),
        pb::PickItem { kind: pb::PickKind::Prefill as i32, pick: None, trace_context: Default::default() },
        item(pb::PickKind::Prefill, pick("not-a-lease", "m", 10)),
        item(pb::PickKind::Prefill, pick(&lease, "m", 20)),
    ];
    let unary_unknown = router.pick_decode(pick(&lease, "no-such-model", 10)).await.unwrap_err();
    let answer = router.pick_many(pb::PickManyRequest { picks }).await.unwrap().into_inner();
    assert_eq!(answer.results.len(), 6);
    let mut failures = Vec::new();
    let mut booked = Vec::new();
    for result in answer.results {
        match result.outcome.expect("every pick has an outcome") {
            Outcome::Picked(p) => booked.push(p.reservation_id),
            Outcome::Failed(f) => {
                let status = status_of_failure(f);
                failures.push((
                    status.code(),
                    StatusReason::of(&status).known(),
                    status.message().to_owned(),
                ));
            }
        }
    }
    assert_eq!(booked.len(), 2, "the good picks are booked: {failures:?}");
    let reasons: Vec<_> = failures.iter().map(|f| (f.0, f.1)).collect();
    let invalid = (Code::InvalidArgument, Some(ErrorReason::InvalidArgument));
    assert_eq!(
        reasons,
        vec![(unary_unknown.code(), StatusReason::of(&unary_unknown).known()), invalid, invalid, invalid]
    );
    assert_eq!(reasons[0].1, Some(ErrorReason::UnknownModel));
    assert_eq!(failures[0].2, unary_unknown.message(), "the same message as the unary call");
    assert!(failures[1].2.contains("picks.kind"), "{}", failures[1].2);
    assert!(failures[2].2.contains("picks.pick"), "{}", failures[2].2);
    assert!(failures[3].2.contains("lease"), "{}", failures[3].2);

    // The refused picks booked nothing: releasing the booked two leaves the ledger at zero.
    let releases = booked.iter().map(|id| release(id, ReleaseReason::Eof)).collect();
    router.release_many(pb::ReleaseManyRequest { releases }).await.unwrap();
    assert!(held(&control, "d").await.iter().chain(&held(&control, "p").await).all(|h| *h == (0, 0)));
    control.stop().await;
}

#[tokio::test]
async fn a_pick_many_of_more_than_1024_picks_is_refused_whole_and_an_empty_one_answers_nothing() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let empty = router.pick_many(pb::PickManyRequest::default()).await.unwrap().into_inner();
    assert!(empty.results.is_empty());
    let picks = vec![item(pb::PickKind::Decode, pick(&lease, "m", 1)); 1025];
    let err = router.pick_many(pb::PickManyRequest { picks }).await.unwrap_err();
    assert_eq!(
        (err.code(), StatusReason::of(&err).known()),
        (Code::InvalidArgument, Some(ErrorReason::InvalidArgument))
    );
    assert!(err.message().contains("picks"), "{}", err.message());
    assert!(held(&control, "d").await.iter().all(|h| *h == (0, 0)), "nothing was booked");
    control.stop().await;
}

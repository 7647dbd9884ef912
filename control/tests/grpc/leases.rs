//! Proxy leases: keep-alive, expiry, close.

use std::time::{Duration, Instant};

use infera_proto::pb::{self, ReleaseReason};
use tonic::Code;

use crate::harness::*;

#[tokio::test]
async fn an_expired_lease_releases_everything_it_held() {
    let control = Control::start(&pd_workers(4), &["--decode-input-demand", "on"]).await;
    let survivor = control.lease(0).await;
    let lease = control.lease(200).await;
    let mut router = control.router().await;
    let kept = router.pick_decode(pick(&survivor, "m", 50)).await.unwrap().into_inner();
    for i in 0..10 {
        router.pick_decode(pick(&lease, "m", 100 + i)).await.unwrap();
        router.pick_prefill(pick(&lease, "m", 100 + i)).await.unwrap();
    }
    // The proxy "dies": no keep-alive. Control releases its 20 reservations at expiry; the
    // other lease keeps its own (it is renewed).
    let mut admin = control.admin().await;
    eventually(Duration::from_secs(10), "the dead lease's reservations are released", || {
        let (mut admin, mut router, survivor) = (admin.clone(), router.clone(), survivor.clone());
        async move {
            router.keep_alive(pb::KeepAliveRequest { lease_id: survivor }).await.unwrap();
            admin
                .list_reservations(pb::ListReservationsRequest::default())
                .await
                .unwrap()
                .into_inner()
                .reservations
                .len()
                == 1
        }
    })
    .await;
    let left = admin.list_reservations(pb::ListReservationsRequest::default()).await.unwrap().into_inner();
    assert_eq!(left.reservations[0].reservation_id, kept.reservation_id);
    assert_eq!(held(&control, "p").await, vec![(0, 0); 2]);
    let err = router.keep_alive(pb::KeepAliveRequest { lease_id: lease.clone() }).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = router.pick_decode(pick(&lease, "m", 1)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "a dead lease cannot book");
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_lease_expiries_total"), Some(1.0));
    assert_eq!(
        sample(&metrics, "infera_router_releases_total{kind=\"decode\",reason=\"lease_expired\"}"),
        Some(10.0)
    );
    assert_eq!(
        sample(&metrics, "infera_router_releases_total{kind=\"prefill\",reason=\"lease_expired\"}"),
        Some(10.0)
    );
    assert_eq!(sample(&metrics, "infera_router_leases"), Some(1.0));
    // A release that arrives after the expiry is a harmless repeat.
    router.release(release(&kept.reservation_id, ReleaseReason::Eof)).await.unwrap();
    assert_eq!(held(&control, "d").await, vec![(0, 0); 4]);
    control.stop().await;
}

#[tokio::test]
async fn keep_alive_holds_a_lease_past_its_ttl() {
    let control = Control::start(&pd_workers(1), &[]).await;
    let lease = control.lease(300).await;
    let mut router = control.router().await;
    router.pick_decode(pick(&lease, "m", 5)).await.unwrap();
    // Renew every 100 ms for three TTLs: the reservation must survive.
    let end = Instant::now() + Duration::from_millis(900);
    while Instant::now() < end {
        let l =
            router.keep_alive(pb::KeepAliveRequest { lease_id: lease.clone() }).await.unwrap().into_inner();
        assert_eq!(l.ttl_ms, 300);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(held(&control, "d").await, vec![(1, 5)]);
    control.stop().await;
}

#[tokio::test]
async fn closing_a_lease_releases_what_it_holds_at_once() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    for _ in 0..3 {
        router.pick_decode(pick(&lease, "m", 5)).await.unwrap();
    }
    let closed =
        router.close_lease(pb::CloseLeaseRequest { lease_id: lease.clone() }).await.unwrap().into_inner();
    assert_eq!(closed.released_reservations, 3);
    assert_eq!(held(&control, "d").await, vec![(0, 0); 2]);
    let again = router.close_lease(pb::CloseLeaseRequest { lease_id: lease }).await.unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    // Requested TTLs are clamped to 100 ms .. 300 s.
    let l =
        router.open_lease(pb::OpenLeaseRequest { holder: "p".into(), ttl_ms: 1 }).await.unwrap().into_inner();
    assert_eq!(l.ttl_ms, 100);
    let l =
        router.open_lease(pb::OpenLeaseRequest { holder: "p".into(), ttl_ms: 0 }).await.unwrap().into_inner();
    assert_eq!(l.ttl_ms, 10_000);
    control.stop().await;
}

//! The warm rebuild: a control that restarts knows no lease and no reservation, and the proxies
//! re-declare every leg they have in flight under their new lease, so its ledger holds the
//! streams that were open before it went away.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use infera_proto::pb;

use crate::harness::*;

/// Opens `n` long streams spread over the proxies, each read to its first chunk.
async fn open_streams(cluster: &Cluster, n: usize) -> Vec<hyper::body::Incoming> {
    let mut bodies = Vec::new();
    for i in 0..n {
        let url = format!("{}/v1/chat/completions", cluster.proxies[i % cluster.proxies.len()]);
        let resp = send(&url, Bytes::from(chat(50_000, true).to_string()), &[]).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        http_body_util::BodyExt::frame(&mut body).await.unwrap().unwrap();
        bodies.push(body);
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_control_is_warm_again_from_what_the_proxies_declare() {
    let mut cluster = Cluster::start(Shape::default()).await;
    let streams = open_streams(&cluster, 8).await;
    // Every prefill leg ended with its first token; the 8 decode legs are held.
    let held = eventually::poll(Duration::from_secs(10), "the 8 decode legs alone held", async || {
        let l = cluster.ledger().await;
        (l.held_requests == 8).then_some(l)
    })
    .await
    .unwrap();
    cluster.restart_control().await;
    // The new instance starts empty; each proxy opens a lease and re-declares its 4 streams.
    let rebuilt =
        eventually::poll(Duration::from_secs(10), "the new control to hold the 8 streams", async || {
            (cluster.ledger().await == held).then_some(())
        })
        .await;
    rebuilt.unwrap();
    let rows = cluster.admin().await.list_reservations(pb::ListReservationsRequest::default()).await.unwrap();
    let rows = rows.into_inner().reservations;
    assert_eq!(rows.len(), 8, "{rows:#?}");
    assert!(rows.iter().all(|r| r.kind == pb::PickKind::Decode as i32), "{rows:#?}");
    let config =
        cluster.admin().await.get_config(pb::GetConfigRequest::default()).await.unwrap().into_inner();
    let leadership = config.leadership.unwrap();
    assert_eq!(leadership.role, "standalone");
    // Each stream ends exactly once, against the reservation that stands for it now.
    drop(streams);
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_routed_locally_while_control_was_down_are_booked_once_it_is_back() {
    let mut cluster = Cluster::start(Shape { proxies: 1, ..Shape::default() }).await;
    cluster.stop_control().await;
    // No control: both legs of each stream are routed locally from the last target list.
    let streams = open_streams(&cluster, 3).await;
    cluster.restart_control().await;
    eventually::poll(
        Duration::from_secs(15),
        "the returned control to hold the 3 local streams",
        async || (cluster.ledger().await.held_requests == 3).then_some(()),
    )
    .await
    .unwrap();
    let admin = cluster.admin().await;
    let rows = admin.clone().list_reservations(pb::ListReservationsRequest::default()).await.unwrap();
    assert!(rows.into_inner().reservations.iter().all(|r| r.kind == pb::PickKind::Decode as i32));
    let metrics = cluster.control_metrics().await;
    let fallback = metrics
        .lines()
        .find(|l| l.starts_with("infera_router_redeclared_total{kind=\"decode\",origin=\"fallback\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(fallback, Some(3.0), "{metrics}");
    drop(streams);
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

//! Engine readings end to end: control reads each sim's `GET /v1/loads` and shows it beside
//! the ledger in `Admin/ListTargets`; while streams run, what the ledger holds per decode
//! target is what the engine runs and queues there (drift 0), and both return to 0.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use infera_proto::pb;

use crate::harness::*;

/// Decode rows of `Admin/ListTargets`.
async fn decode_rows(cluster: &Cluster) -> Vec<pb::TargetStatus> {
    let req = pb::ListTargetsRequest { role: pb::Role::Decode as i32, ..Default::default() };
    cluster.admin().await.list_targets(req).await.unwrap().into_inner().targets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_and_the_engines_agree_while_streams_run_and_after() {
    let control_flags = vec!["--decode-input-demand", "on", "--engine-poll-ms", "20"];
    let cluster = Cluster::start(Shape { control_flags, proxies: 1, ..Shape::default() }).await;
    let url = format!("{}/v1/chat/completions", cluster.proxies[0]);
    let mut streams = Vec::new();
    for _ in 0..12 {
        let resp = send(&url, Bytes::from(chat(20_000, true).to_string()), &[]).await;
        assert!(resp.status().is_success());
        let mut body = resp.into_body();
        body.frame().await.unwrap().unwrap();
        streams.push(body);
    }
    let rows = eventually(
        Duration::from_secs(15),
        "every decode rank's engine to hold what the ledger holds",
        async || {
            let rows = decode_rows(&cluster).await;
            let held: u64 = rows.iter().map(|r| r.held_requests).sum();
            // Every prefill leg has ended by then: each request is past its prefill.
            let agree = rows
                .iter()
                .all(|r| r.engine.is_some() && r.drift_requests == 0 && r.prefilling_requests == 0);
            (held == 12 && agree).then_some(rows)
        },
    )
    .await;
    for r in &rows {
        let engine = r.engine.unwrap();
        assert_eq!(engine.running_requests + engine.queued_requests, r.held_requests, "{r:?}");
        assert!(engine.age_ms < 5_000, "a fresh reading: {r:?}");
    }
    // The gauges are set from the same readings once a second.
    eventually(Duration::from_secs(10), "the engine gauges of decode-0/0", async || {
        let metrics = cluster.control_metrics().await;
        ["infera_router_engine_running_requests", "infera_router_demand_drift_requests"]
            .iter()
            .all(|family| metrics.contains(&format!("{family}{{target=\"decode-0/0\"}}")))
    })
    .await;
    drop(streams); // the client goes away: every stream is cancelled
    cluster.ledger_returns_to_zero().await;
    eventually(Duration::from_secs(15), "every decode engine to hold nothing", async || {
        decode_rows(&cluster).await.iter().all(|r| {
            r.engine.is_some_and(|e| e.running_requests + e.queued_requests == 0) && r.drift_requests == 0
        })
    })
    .await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_engine_readings_off_targets_carry_none() {
    let control_flags = vec!["--decode-input-demand", "on", "--engine-poll-ms", "0"];
    let cluster = Cluster::start(Shape { control_flags, proxies: 1, ..Shape::default() }).await;
    let rows = decode_rows(&cluster).await;
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.engine.is_none() && r.drift_requests == 0), "{rows:?}");
    cluster.stop().await;
}

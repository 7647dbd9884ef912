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

/// Every row of `Admin/ListTargets`.
async fn all_rows(cluster: &Cluster) -> Vec<pb::TargetStatus> {
    let req = pb::ListTargetsRequest::default();
    cluster.admin().await.list_targets(req).await.unwrap().into_inner().targets
}

/// A scheduler that hangs while its HTTP server still answers (the sim's `hang` fault: its
/// `/v1/loads` repeats the last snapshot, clock and all, as SGLang 0.5.23's does) is ejected as
/// `engine_stuck`: the ranks holding requests, not the idle one; and only while it hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_engine_that_still_answers_is_ejected_as_stuck() {
    let control_flags = vec![
        "--decode-input-demand",
        "on",
        "--engine-poll-ms",
        "20",
        "--eject-after-failures",
        "2",
        "--eject-open-ms",
        "60000",
    ];
    let shape = Shape { pd: false, decode_dp: 2, control_flags, proxies: 1, ..Shape::default() };
    let cluster = Cluster::start(shape).await;
    let url = format!("{}/v1/chat/completions", cluster.proxies[0]);
    // One long stream: it lands on one rank, the other stays idle.
    let resp = send(&url, Bytes::from(chat(100_000, true).to_string()), &[]).await;
    assert!(resp.status().is_success());
    let mut body = resp.into_body();
    body.frame().await.unwrap().unwrap();
    let busy = eventually(Duration::from_secs(10), "the engine to run the stream", async || {
        let rows = all_rows(&cluster).await;
        rows.iter().find(|r| r.engine.is_some_and(|e| e.running_requests == 1)).map(|r| r.target.clone())
    })
    .await
    .unwrap();
    let faults = format!("{}/sim/faults", cluster.decode().url);
    let (status, _) = post_json(&faults, &serde_json::json!({"hang": true}), &[]).await;
    assert!(status.is_success());
    let clocks = async || {
        cluster.decode().loads().await.iter().map(|l| l["timestamp"].to_string()).collect::<Vec<_>>()
    };
    let first = clocks().await;
    // What was sent before it hung drains; then nothing comes.
    let quiet = Duration::from_millis(500);
    let mut drained = 0;
    while tokio::time::timeout(quiet, body.frame()).await.is_ok() {
        drained += 1;
        assert!(drained < 10_000, "a hung engine keeps sending");
    }
    assert!(tokio::time::timeout(quiet, body.frame()).await.is_err(), "a hung engine sends nothing");
    assert_eq!(clocks().await, first, "its clock stands still");
    // Fresh answers keep coming, but the clock in them stands still: ejected after the stale
    // window (5 s) and two checks.
    let rows = eventually(Duration::from_secs(20), "the hung rank to be ejected", async || {
        let rows = all_rows(&cluster).await;
        rows.iter().any(|r| r.target.as_ref() == Some(&busy) && r.health == "ejected").then_some(rows)
    })
    .await;
    for r in &rows {
        assert!(r.engine.unwrap().age_ms < 2_000, "the engine still answers: {r:?}");
        if r.target.as_ref() != Some(&busy) {
            assert_eq!(r.health, "healthy", "an idle rank's still clock is not a hang: {r:?}");
        }
    }
    let metrics = cluster.control_metrics().await;
    assert!(metrics.contains(r#"infera_router_ejections_total{cause="engine_stuck"} 1"#), "{metrics}");
    let (status, _) = post_json(&faults, &serde_json::json!({"hang": false}), &[]).await;
    assert!(status.is_success());
    drop(body);
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}

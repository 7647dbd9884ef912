//! Engine readings from the load socket: a sim publishing each rank's `LoadStat`
//! (`--load-publish-endpoint`), control following it with polling off (`--engine-poll-ms 0`):
//! `Admin/ListTargets` shows what the rank runs, as it changes.

use std::time::Duration;

use infera_proto::pb;
use infera_testkit::{ControlSpec, SimSpec, Workers};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::harness::eventually;

/// Running requests of `target` as `Admin/ListTargets` shows them (`None`: no reading yet).
async fn running(control: &infera_testkit::Control, target: &str) -> Option<u64> {
    let rows = control.targets().await;
    let row = rows
        .iter()
        .find(|r| r.target.as_ref().is_some_and(|t| format!("{}/{}", t.worker_id, t.dp_rank) == target))?;
    row.engine.map(|e| e.running_requests)
}

/// A streaming `/generate` on `rank` that runs until the connection is dropped.
async fn long_stream(http: std::net::SocketAddr, rank: u32) -> TcpStream {
    let body = serde_json::json!({"input_ids": (0..32).collect::<Vec<u32>>(), "stream": true,
        "routed_dp_rank": rank, "sampling_params": {"max_new_tokens": 100_000, "ignore_eos": true}})
    .to_string();
    let mut conn = TcpStream::connect(http).await.unwrap();
    let head = format!(
        "POST /generate HTTP/1.1\r\nhost: {http}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    assert!(conn.read(&mut first).await.unwrap() > 0, "the stream starts");
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_targets_shows_the_load_socket_with_polling_off() {
    let mut sim =
        SimSpec::mixed("mixed-0", "m", 2).kv_events("kv@mixed-0").load_events().start().await.unwrap();
    let endpoint = sim.record.load_events.clone().expect("the record names the load socket");
    assert!(endpoint.starts_with("tcp://127.0.0.1:"), "{endpoint}");
    let spec = ControlSpec::new(Workers::Records(vec![sim.record.clone()])).flags(["--engine-poll-ms", "0"]);
    let mut control = spec.start().await.unwrap();
    let wait = Duration::from_secs(15);

    // Idle: the heartbeat says 0 on both ranks.
    eventually(wait, "both ranks' first reading", async || {
        running(&control, "mixed-0/0").await == Some(0) && running(&control, "mixed-0/1").await == Some(0)
    })
    .await;
    let stream = long_stream(sim.http, 1).await;
    eventually(wait, "rank 1 to show its running request", async || {
        running(&control, "mixed-0/1").await == Some(1)
    })
    .await;
    assert_eq!(running(&control, "mixed-0/0").await, Some(0));
    let row = control.targets().await.into_iter().find(|r| r.target.as_ref().unwrap().dp_rank == 1).unwrap();
    let engine: pb::EngineLoad = row.engine.unwrap();
    assert!(engine.used_tokens > 0 && engine.max_total_tokens > 0, "{engine:?}");
    drop(stream);
    eventually(wait, "rank 1 to show it is idle again", async || {
        running(&control, "mixed-0/1").await == Some(0)
    })
    .await;
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_running_follows_what_the_engines_report_not_the_ledger() {
    let mut sim = SimSpec::mixed("mixed-0", "m", 2).start().await.unwrap();
    let flags =
        ["--decode-input-demand", "off", "--decode-policy", "least-running", "--engine-poll-ms", "50"];
    let spec = ControlSpec::new(Workers::Records(vec![sim.record.clone()])).flags(flags);
    let mut control = spec.start().await.unwrap();
    let wait = Duration::from_secs(15);
    // Rank 1 runs two requests control never booked (sent to the engine directly).
    let streams = [long_stream(sim.http, 1).await, long_stream(sim.http, 1).await];
    eventually(wait, "rank 1's engine to report both", async || {
        running(&control, "mixed-0/1").await == Some(2) && running(&control, "mixed-0/0").await == Some(0)
    })
    .await;
    let mut router = control.router().await;
    let lease = router
        .open_lease(pb::OpenLeaseRequest { holder: "test-proxy".into(), ttl_ms: 0 })
        .await
        .unwrap()
        .into_inner()
        .lease_id;
    // The ledger fills rank 0 with every pick; the engines still say rank 0 is the emptier.
    let mut ranks = Vec::new();
    for i in 0..4 {
        let pick = pb::PickRequest {
            lease_id: lease.clone(),
            request_id: format!("req-{i}"),
            model: "m".into(),
            input_tokens: 100,
            ..pb::PickRequest::default()
        };
        let picked = router.pick_decode(pick).await.unwrap().into_inner();
        ranks.push(picked.target.unwrap().dp_rank);
    }
    assert_eq!(ranks, [0, 0, 0, 0], "round-robin or the ledger would have used rank 1");
    drop(streams);
    router.close_lease(pb::CloseLeaseRequest { lease_id: lease }).await.unwrap();
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

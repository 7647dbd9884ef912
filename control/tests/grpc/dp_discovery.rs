//! `dp_size` left out of a worker's record: control asks the worker's `/server_info` (a real
//! sim's) before routing to it; a given `dp_size` is kept; a late answer makes the worker
//! routable then; a malformed one keeps only that worker out.

use std::time::Duration;

use infera_proto::pb;
use infera_proto::types::{WorkerId, WorkerRecord};
use infera_registry::Registration;
use infera_registry::test_server::EtcdServer;
use infera_testkit::http::metric_sum;
use infera_testkit::{Control, ControlSpec, SimSpec, Workers};
use tokio::net::TcpListener;

use crate::harness::{eventually, pick};

const WAIT: Duration = Duration::from_secs(15);

/// `worker`'s ranks in `Admin/ListTargets`, in order, and how many have an engine reading.
async fn ranks(control: &Control, worker: &str) -> (Vec<u32>, usize) {
    let rows = control.targets().await;
    let mine: Vec<_> =
        rows.iter().filter(|r| r.target.as_ref().is_some_and(|t| t.worker_id == worker)).collect();
    let ranks = mine.iter().map(|r| r.target.as_ref().unwrap().dp_rank).collect();
    (ranks, mine.iter().filter(|r| r.engine.is_some()).count())
}

async fn failures(control: &Control, worker: &str, reason: &str) -> f64 {
    let labels = format!("worker=\"{worker}\",reason=\"{reason}\"");
    metric_sum(&control.metrics().await.unwrap(), "infera_router_dp_size_discovery_failures_total", &labels)
}

async fn awaiting(control: &Control) -> f64 {
    metric_sum(&control.metrics().await.unwrap(), "infera_router_workers_awaiting_dp_size", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_file_entry_without_dp_size_gets_the_eight_ranks_the_sim_reports() {
    let mut sim = SimSpec::decode("decode-0", "m", 8).start().await.unwrap();
    let registered = sim.record.clone().without_dp_size();
    let mut control = ControlSpec::new(Workers::Registered(vec![registered])).start().await.unwrap();
    let text = std::fs::read_to_string(control.workers_file().unwrap()).unwrap();
    assert!(!text.contains("dp_size"), "the file leaves it out:\n{text}");

    let want: Vec<u32> = (0..8).collect();
    // The engine poller reads /v1/loads over the discovered ranks: every rank gets a reading.
    eventually(WAIT, "decode-0's 8 discovered ranks, each with an engine reading", async || {
        ranks(&control, "decode-0").await == (want.clone(), 8)
    })
    .await;
    assert_eq!(awaiting(&control).await, 0.0);
    let lease = pb::OpenLeaseRequest { holder: "test".into(), ttl_ms: 0 };
    let lease = control.router().await.open_lease(lease).await.unwrap().into_inner().lease_id;
    let picked = control.router().await.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(picked.worker.unwrap().dp_size, 8, "the pick's worker carries the discovered size");
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_dp_size_is_kept_whatever_the_worker_reports() {
    let mut sim = SimSpec::decode("decode-0", "m", 8).start().await.unwrap();
    let record = sim.record.clone().with_dp_size(2);
    let mut control = ControlSpec::new(Workers::Records(vec![record])).start().await.unwrap();
    assert_eq!(ranks(&control, "decode-0").await.0, [0, 1], "routable at once: nothing to ask");
    assert_eq!(awaiting(&control).await, 0.0);
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_server_info_answers_late_becomes_routable_then() {
    // Control is told of the worker before it serves: its address is bound, nothing answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let spec = SimSpec::decode("decode-0", "m", 4);
    let registered = spec.record_at(listener.local_addr().unwrap().port()).without_dp_size();
    let mut control = ControlSpec::new(Workers::Registered(vec![registered])).start().await.unwrap();

    eventually(WAIT, "a failed attempt counted as unanswered", async || {
        failures(&control, "decode-0", "unanswered").await >= 1.0
    })
    .await;
    assert_eq!(ranks(&control, "decode-0").await.0, Vec::<u32>::new(), "not routable while unknown");
    assert_eq!(awaiting(&control).await, 1.0);

    let mut sim = spec.start_on(listener).await.unwrap();
    eventually(WAIT, "decode-0's 4 ranks once it answers", async || {
        ranks(&control, "decode-0").await.0 == [0, 1, 2, 3]
    })
    .await;
    assert_eq!(awaiting(&control).await, 0.0);
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_dp_size_keeps_out_that_worker_only() {
    let mut good = SimSpec::decode("decode-0", "m", 4).start().await.unwrap();
    let mut bad = SimSpec::decode("decode-1", "m", 4)
        .sim_flag("--sim-server-info-override", r#"{"dp_size": "four"}"#)
        .start()
        .await
        .unwrap();
    let workers = vec![good.record.clone().without_dp_size(), bad.record.clone().without_dp_size()];
    let mut control = ControlSpec::new(Workers::Registered(workers)).start().await.unwrap();

    eventually(WAIT, "decode-0's 4 ranks and decode-1's malformed answer counted", async || {
        ranks(&control, "decode-0").await.0 == [0, 1, 2, 3]
            && failures(&control, "decode-1", "malformed").await >= 1.0
    })
    .await;
    assert_eq!(ranks(&control, "decode-1").await.0, Vec::<u32>::new());
    assert_eq!(failures(&control, "decode-0", "malformed").await, 0.0);
    assert_eq!(awaiting(&control).await, 1.0, "decode-1 still waits (and is retried)");
    control.stop().await.unwrap();
    good.stop().await.unwrap();
    bad.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_records_with_and_without_dp_size() {
    let etcd = EtcdServer::start();
    let mut sim = SimSpec::decode("decode-0", "m", 8).start().await.unwrap();
    let mut control = ControlSpec::new(Workers::None).etcd(etcd.url()).start().await.unwrap();

    // Left out: asked.
    let asked =
        Registration::start(vec![etcd.url()], sim.record.clone().without_dp_size(), Duration::from_secs(2));
    eventually(WAIT, "decode-0's 8 discovered ranks", async || {
        ranks(&control, "decode-0").await.0.len() == 8
    })
    .await;
    // Given (another id, the same sim): kept.
    let given: WorkerRecord =
        WorkerRecord { id: WorkerId::new("decode-1"), ..sim.record.clone() }.with_dp_size(3);
    let kept = Registration::start(vec![etcd.url()], given, Duration::from_secs(2));
    eventually(WAIT, "decode-1's 3 given ranks", async || ranks(&control, "decode-1").await.0 == [0, 1, 2])
        .await;
    assert_eq!(ranks(&control, "decode-0").await.0.len(), 8);

    // A worker that leaves while it is being asked is asked no more.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let record = SimSpec::decode("decode-2", "m", 1).record_at(silent.local_addr().unwrap().port());
    let waiting = Registration::start(vec![etcd.url()], record.without_dp_size(), Duration::from_secs(2));
    eventually(WAIT, "decode-2 awaits its size", async || awaiting(&control).await == 1.0).await;
    waiting.stop().await;
    eventually(WAIT, "decode-2 no longer awaited", async || awaiting(&control).await == 0.0).await;

    asked.stop().await;
    kept.stop().await;
    eventually(WAIT, "both gone", async || control.targets().await.is_empty()).await;
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

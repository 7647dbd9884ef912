//! Engine facts: control reads every worker's `/server_info` (a real sim's) before routing to it;
//! the engine's ranks and page size win over the record's (the disagreement counted); a late
//! answer makes the worker routable then; a malformed one, or an engine serving another model or
//! role, keeps only that worker out.

use std::time::Duration;

use infera_proto::pb;
use infera_proto::types::{WorkerId, WorkerRecord};
use infera_registry::Registration;
use infera_testkit::EtcdServer;
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
    metric_sum(&control.metrics().await.unwrap(), "infera_router_engine_facts_failures_total", &labels)
}

async fn mismatches(control: &Control, worker: &str, field: &str) -> f64 {
    let labels = format!("worker=\"{worker}\",field=\"{field}\"");
    metric_sum(&control.metrics().await.unwrap(), "infera_router_record_mismatches_total", &labels)
}

async fn awaiting(control: &Control) -> f64 {
    metric_sum(&control.metrics().await.unwrap(), "infera_router_workers_awaiting_engine_facts", "")
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
async fn the_engines_ranks_and_page_size_win_over_the_records_and_the_disagreement_is_counted() {
    let mut sim = SimSpec::decode("decode-0", "m", 8).page_size(16).start().await.unwrap();
    let record = sim.record.clone().with_dp_size(2).with_page_size(1);
    let mut control = ControlSpec::new(Workers::Records(vec![record])).start().await.unwrap();
    let want: Vec<u32> = (0..8).collect();
    eventually(WAIT, "decode-0's 8 ranks, as its engine runs them", async || {
        ranks(&control, "decode-0").await.0 == want
    })
    .await;
    let rows = control.targets().await;
    assert!(rows.iter().all(|r| r.worker.as_ref().unwrap().page_size == 16), "the engine's page size");
    assert_eq!(rows[0].worker.as_ref().unwrap().transfer_backend, "mooncake");
    assert_eq!(mismatches(&control, "decode-0", "dp_size").await, 1.0, "counted once");
    assert_eq!(mismatches(&control, "decode-0", "page_size").await, 1.0);
    assert_eq!(awaiting(&control).await, 0.0);
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_serving_another_model_or_role_holds_its_worker_out() {
    let mut good = SimSpec::decode("decode-0", "m", 2).start().await.unwrap();
    let mut other_model = SimSpec::decode("decode-1", "other", 2).start().await.unwrap();
    let mut other_role = SimSpec::decode("decode-2", "m", 2).start().await.unwrap();
    let mut wrong_model = other_model.record.clone();
    wrong_model.model = infera_proto::types::ModelName::new("m");
    let mut wrong_role = other_role.record.clone();
    wrong_role.role = infera_proto::types::Role::Prefill;
    let workers = vec![good.record.clone(), wrong_model, wrong_role];
    let mut control = ControlSpec::new(Workers::Records(workers)).start().await.unwrap();

    eventually(WAIT, "decode-0 routable and both mismatches counted", async || {
        ranks(&control, "decode-0").await.0 == [0, 1]
            && failures(&control, "decode-1", "model_mismatch").await >= 1.0
            && failures(&control, "decode-2", "role_mismatch").await >= 1.0
    })
    .await;
    for held_out in ["decode-1", "decode-2"] {
        assert_eq!(ranks(&control, held_out).await.0, Vec::<u32>::new(), "{held_out} is not a target");
    }
    assert_eq!(awaiting(&control).await, 2.0, "both are still asked (an engine may be fixed)");
    // Control opens leases once its bounded wait for the two is over.
    let lease = eventually(WAIT, "a lease once control stops waiting for the held-out workers", async || {
        let req = pb::OpenLeaseRequest { holder: "test".into(), ttl_ms: 0 };
        control.router().await.open_lease(req).await.ok().map(|r| r.into_inner().lease_id)
    })
    .await;
    for _ in 0..4 {
        let picked = control.router().await.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        assert_eq!(picked.worker.unwrap().worker_id, "decode-0");
    }
    control.stop().await.unwrap();
    for sim in [&mut good, &mut other_model, &mut other_role] {
        sim.stop().await.unwrap();
    }
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
    // Given wrong (another id, the same sim): the engine's 8.
    let given: WorkerRecord =
        WorkerRecord { id: WorkerId::new("decode-1"), ..sim.record.clone() }.with_dp_size(3);
    let kept = Registration::start(vec![etcd.url()], given, Duration::from_secs(2));
    eventually(WAIT, "decode-1's 8 ranks, not the 3 its record says", async || {
        ranks(&control, "decode-1").await.0.len() == 8
    })
    .await;
    assert_eq!(mismatches(&control, "decode-1", "dp_size").await, 1.0);
    assert_eq!(ranks(&control, "decode-0").await.0.len(), 8);

    // A worker that leaves while it is being asked is asked no more.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let record = SimSpec::decode("decode-2", "m", 1).record_at(silent.local_addr().unwrap().port());
    let waiting = Registration::start(vec![etcd.url()], record.without_dp_size(), Duration::from_secs(2));
    eventually(WAIT, "decode-2 awaits its facts", async || awaiting(&control).await == 1.0).await;
    waiting.stop().await;
    eventually(WAIT, "decode-2 no longer awaited", async || awaiting(&control).await == 0.0).await;

    asked.stop().await;
    kept.stop().await;
    eventually(WAIT, "both gone", async || control.targets().await.is_empty()).await;
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}

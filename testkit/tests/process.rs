//! The kit's process handles against the real binaries: a SIGKILLed control restarts on the
//! same address as a new instance (a new epoch: its old leases are unknown), a SIGSTOPped one
//! answers nothing until SIGCONT, and a sim process keeps its ports across a restart.

use std::time::Duration;

use infera_proto::pb;
use infera_proto::types::WorkerRecord;
use infera_testkit::{ControlSpec, EngineStubs, SimSpec, Workers, eventually, poll};

/// Control over one decode worker whose engine is a stub (it answers `/server_info`); keep the
/// stubs as long as control runs.
async fn control() -> (EngineStubs, ControlSpec) {
    let record = WorkerRecord::decode("d", "http://stub", "m", 2);
    let engines = EngineStubs::start_records([record]).await.unwrap();
    let spec = ControlSpec::new(Workers::Records(engines.worker_records())).flags(["--engine-poll-ms", "0"]);
    (engines, spec)
}

async fn open_lease(control: &infera_testkit::Control) -> String {
    let req = pb::OpenLeaseRequest { holder: "kit-test".into(), ttl_ms: 0 };
    control.router().await.open_lease(req).await.unwrap().into_inner().lease_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_control_comes_back_on_its_address_as_a_new_instance() {
    let (_engines, spec) = control().await;
    let mut control = spec.spawn().await.unwrap();
    let (addr, metrics) = (control.addr, control.metrics_addr);
    let first = open_lease(&control).await;
    let pid = control.node.process().unwrap().pid().unwrap();
    control.restart(true).await.unwrap();
    assert_eq!((control.addr, control.metrics_addr), (addr, metrics), "the same flags and ports");
    assert_ne!(control.node.process().unwrap().pid(), Some(pid), "a new process");
    let second = open_lease(&control).await;
    assert_ne!(first.split('-').nth(1), second.split('-').nth(1), "a new epoch: {first} vs {second}");
    let status =
        control.router().await.keep_alive(pb::KeepAliveRequest { lease_id: first }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "the old instance's lease is unknown");
    control.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_control_answers_nothing_until_it_is_resumed() {
    let (_engines, spec) = control().await;
    let mut control = spec.spawn().await.unwrap();
    open_lease(&control).await;
    let process = control.node.process().unwrap();
    process.pause().unwrap();
    let url = control.url();
    let call = async {
        let channel = tonic::transport::Channel::from_shared(url.clone()).unwrap().connect().await?;
        let req = pb::OpenLeaseRequest { holder: "kit-test".into(), ttl_ms: 0 };
        pb::router_client::RouterClient::new(channel).open_lease(req).await.map_err(anyhow::Error::from)?;
        anyhow::Ok(())
    };
    let paused = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(paused.is_err(), "a stopped process cannot answer: {paused:?}");
    control.node.process().unwrap().resume().unwrap();
    eventually(Duration::from_secs(10), "the resumed control to answer", async || {
        let metrics = control.metrics().await;
        metrics.is_ok_and(|m| m.contains("infera_router_leases"))
    })
    .await;
    control.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sim_process_keeps_its_ports_and_its_record_across_a_restart() {
    let mut sim = SimSpec::decode("decode-0", "m", 4).spawn().await.unwrap();
    assert_eq!(sim.record.dp_size, 4);
    assert_eq!(sim.record.url, sim.url);
    assert_eq!(sim.loads().await.len(), 4, "one /v1/loads entry per rank");
    let url = sim.url.clone();
    sim.node.process().unwrap().restart().unwrap();
    let answered = poll(Duration::from_secs(10), "the restarted sim to answer", async || {
        infera_testkit::http::get_json(&format!("{url}/v1/loads")).await.ok()
    })
    .await
    .unwrap();
    assert_eq!(answered["loads"].as_array().map(Vec::len), Some(4));
    sim.stop().await.unwrap();
}

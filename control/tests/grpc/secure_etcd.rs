//! Control on an etcd secured as deployments run it (TLS, client certificates required, auth on
//! with infera's roles), authenticating as the `infera-control` user: it follows the workers the
//! registrar (`infera-launch`'s role) registers, leads, persists Admin changes and keeps the
//! proxies' book. Losing its role at run time is an etcd outage: it keeps its view, steps down,
//! and leads again once the role is back.

use std::time::Duration;

use infera_proto::pb;
use infera_proto::types::WorkerRecord;
use infera_registry::Registration;
use infera_registry::roles::{CONTROL, LAUNCH};
use infera_testkit::etcd::{Auth, EtcdServer};

use crate::harness::*;

async fn role(control: &Control) -> String {
    let mut admin = control.admin().await;
    let config = admin.get_config(pb::GetConfigRequest::default()).await.unwrap().into_inner();
    config.leadership.unwrap().role
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_runs_on_a_secured_etcd_with_its_role_and_rides_out_losing_it() {
    let mut etcd = EtcdServer::start_secure();
    let url = etcd.url();
    let record = WorkerRecord::decode("decode-0", "http://stub", "m", 2).with_page_size(64);
    let engines = infera_testkit::EngineStubs::start_records([record]).await.unwrap();
    let registrar = etcd.client_as(LAUNCH.name, Auth::Certificate);
    let _reg = Registration::start(registrar, engines.worker_records().remove(0), Duration::from_secs(10));

    let mut flags = vec!["--etcd".to_owned(), url.clone(), "--decode-input-demand".into(), "on".into()];
    flags.extend(etcd.flags_as(CONTROL.name, Auth::Password));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let control = Control::start_with(&flags).await;
    control.wait_targets(2).await.unwrap();
    let lease = control.lease(0).await;
    let p = control.router().await.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(target_of(&p).0, "decode-0");
    let weight = pb::SetDecodeRequestWeightRequest { decode_request_weight: 90_000.0, auto: false };
    control.admin().await.set_decode_request_weight(weight).await.unwrap();
    // Written with control's role: the settings, the leader key, the proxies' book.
    infera_testkit::poll(Duration::from_secs(10), "control's keys in etcd", async || {
        let keys = etcd.infera_keys().await;
        let weight = keys.get("/infera/v1/config/decode_request_weight").map(|(v, _)| v.as_str());
        weight == Some("90000")
            && keys.contains_key("/infera/v1/control/leader")
            && keys.contains_key("/infera/v1/control/proxies/test-proxy")
    })
    .await
    .unwrap();

    // The role goes, and etcd restarts (every connection is made again): an outage to control.
    let mut root = infera_registry::connect(&etcd.root()).await.unwrap();
    root.user_revoke_role(CONTROL.name, CONTROL.name).await.unwrap();
    tokio::task::block_in_place(|| {
        etcd.stop();
        etcd.resume();
    });
    infera_testkit::poll(Duration::from_secs(15), "control to step down", async || {
        role(&control).await != "leader"
    })
    .await
    .unwrap();
    // Its view stands: the targets are still there (answered by the replica itself).
    assert_eq!(control.targets().await.len(), 2, "the view is kept");

    let mut root = infera_registry::connect(&etcd.root()).await.unwrap();
    root.user_grant_role(CONTROL.name, CONTROL.name).await.unwrap();
    control.wait_leading().await.unwrap();
    let lease = control.lease(0).await;
    let p = control.router().await.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(target_of(&p).0, "decode-0", "leading and routing again");
    control.stop().await;
}

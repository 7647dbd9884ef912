//! `--admin-listen`: Admin on a socket of its own (Router, health and reflection on `--listen`
//! without it), the admin token on that socket, and followers forwarding Admin calls to the
//! leader's Admin socket named by the leader key's `admin_url`.

use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, admin_client::AdminClient, router_client::RouterClient};
use infera_proto::types::WorkerRecord;
use infera_registry::Registration;
use infera_runtime::serve::tls::{ClientFiles, IdentityFiles};
use infera_testkit::EtcdServer;
use infera_testkit::tls::TestCa;
use infera_testkit::{ControlSpec, EngineStubs, Workers};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use tonic_reflection::pb::v1;

use crate::harness::*;

const ADMIN: &str = "infera.control.v1.Admin";
const ROUTER: &str = "infera.control.v1.Router";

/// What the health service of `channel` says of `service` (`Err`: the code it refused with).
async fn health(channel: Channel, service: &str) -> Result<ServingStatus, Code> {
    let req = HealthCheckRequest { service: service.into() };
    match HealthClient::new(channel).check(req).await {
        Ok(answer) => Ok(answer.into_inner().status()),
        Err(status) => Err(status.code()),
    }
}

/// The services reflection (v1) lists on `channel`.
async fn listed(channel: Channel) -> Vec<String> {
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel);
    let ask = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(String::new())),
    };
    let mut answers = client.server_reflection_info(tokio_stream::iter([ask])).await.unwrap().into_inner();
    match answers.message().await.unwrap().expect("one answer").message_response {
        Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("not a service list: {other:?}"),
    }
}

#[tokio::test]
async fn admin_is_served_only_on_its_own_socket_and_router_only_on_listen() {
    let control = Control::start(&pd_workers(2), &["--admin-listen", "127.0.0.1:0"]).await;
    let admin_addr = control.admin_addr.expect("an Admin socket");
    assert_ne!(admin_addr, control.addr);

    // Router on --listen books; Admin on the Admin socket sees the booking.
    let lease = control.lease(0).await;
    control.router().await.pick_decode(pick(&lease, "m", 300)).await.unwrap();
    let booked: u64 = held(&control, "d").await.iter().map(|(_, tokens)| tokens).sum();
    assert_eq!(booked, 300);
    let config = control.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    // GetConfig names the Admin socket, this control's and (standalone: its own) the leader's.
    let term = config.leadership.unwrap();
    assert_eq!(term.admin_url, format!("http://{admin_addr}"));
    assert_eq!(term.leader_admin_url, term.admin_url);
    assert_eq!(term.url, control.url());
    let plain = Control::start(&pd_workers(2), &[]).await;
    let term = plain.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner().leadership;
    let term = term.unwrap();
    assert_eq!((term.admin_url.as_str(), term.leader_admin_url.as_str()), ("", ""), "Admin is at url");
    plain.stop().await;

    // Each service is unknown on the other's socket, as tonic answers for any unknown service.
    let err =
        AdminClient::new(control.channel().await).get_config(pb::GetConfigRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "Admin on --listen: {err:?}");
    let open = pb::OpenLeaseRequest { holder: "p".into(), ttl_ms: 0 };
    let err = RouterClient::new(control.admin_channel().await).open_lease(open).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "Router on --admin-listen: {err:?}");

    // Health on both, each about what it serves.
    let (grpc, admin) = (control.channel().await, control.admin_channel().await);
    assert_eq!(health(grpc.clone(), "").await, Ok(ServingStatus::Serving));
    assert_eq!(health(grpc.clone(), ROUTER).await, Ok(ServingStatus::Serving));
    assert_eq!(health(grpc.clone(), ADMIN).await, Err(Code::NotFound));
    assert_eq!(health(admin.clone(), "").await, Ok(ServingStatus::Serving));
    assert_eq!(health(admin.clone(), ADMIN).await, Ok(ServingStatus::Serving));
    assert_eq!(health(admin.clone(), ROUTER).await, Err(Code::NotFound));

    // Reflection on both, each listing what it serves.
    let on_grpc = listed(grpc).await;
    assert!(on_grpc.iter().any(|s| s == ROUTER) && !on_grpc.iter().any(|s| s == ADMIN), "{on_grpc:?}");
    let on_admin = listed(admin).await;
    assert!(on_admin.iter().any(|s| s == ADMIN) && !on_admin.iter().any(|s| s == ROUTER), "{on_admin:?}");
    assert!(on_admin.iter().any(|s| s == "grpc.health.v1.Health"), "{on_admin:?}");
    control.stop().await;
}

#[tokio::test]
async fn the_admin_token_guards_admin_on_its_own_socket() {
    let flags = ["--admin-listen", "127.0.0.1:0", "--admin-token", "let-me-in"];
    let control = Control::start(&pd_workers(1), &flags).await;
    let mut admin = control.admin().await;
    let err = admin.get_config(pb::GetConfigRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let err = admin.get_config(with_token(pb::GetConfigRequest {}, "wrong")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    admin.get_config(with_token(pb::GetConfigRequest {}, "let-me-in")).await.unwrap();
    // Router on --listen needs no token.
    control.lease(0).await;
    control.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_admin_to_the_leaders_admin_socket() {
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let engines =
        EngineStubs::start_records([WorkerRecord::decode("decode-0", "http://stub", "m", 2)]).await.unwrap();
    let record = engines.worker_records().remove(0);
    let _reg = Registration::start(vec![url.clone()], record, Duration::from_secs(10));
    let flags = [
        "--etcd",
        url.as_str(),
        "--decode-input-demand",
        "on",
        "--engine-poll-ms",
        "0",
        "--admin-listen",
        "127.0.0.1:0",
    ];
    let leader = Control::start_with(&flags).await;
    let follower = Control(ControlSpec::new(Workers::None).flags(flags).start().await.unwrap(), None);

    // The leader key names both of the leader's sockets; its --listen has no Admin, so a
    // follower that forwarded to `url` would get UNIMPLEMENTED.
    let mut etcd_client = infera_registry::connect(&etcd.root()).await.unwrap();
    let got = etcd_client.get("/infera/v1/control/leader", None).await.unwrap();
    let record: serde_json::Value = serde_json::from_slice(got.kvs()[0].value()).unwrap();
    assert_eq!(record["url"], leader.url().as_str(), "{record}");
    assert_eq!(record["admin_url"], leader.admin_url().as_str(), "{record}");
    assert_ne!(leader.admin_url(), leader.url());
    let err = AdminClient::new(leader.channel().await).get_config(pb::GetConfigRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    // Once the follower knows the leader, its Admin socket answers with the leader's state.
    let mut f_admin = follower.admin().await;
    infera_testkit::poll(Duration::from_secs(10), "the follower to forward GetConfig", async || {
        let config = f_admin.clone().get_config(pb::GetConfigRequest {}).await.ok()?.into_inner();
        config.leadership.filter(|l| l.url == leader.url() && l.role == "leader")
    })
    .await
    .unwrap();
    let set = pb::SetDecodeRequestWeightRequest { decode_request_weight: 250_000.0, auto: false };
    let answered = f_admin.set_decode_request_weight(set).await.unwrap().into_inner();
    assert_eq!(answered.leadership.as_ref().unwrap().url, leader.url(), "the leader answered");
    let config = leader.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(config.decode_request_weight, 250_000.0);
    let term = config.leadership.unwrap();
    assert_eq!((term.admin_url, term.leader_admin_url), (leader.admin_url(), leader.admin_url()));

    // Router hints still name the leader's --listen URL, the one proxies use.
    let open = pb::OpenLeaseRequest { holder: "proxy-a".into(), ttl_ms: 0 };
    let err = follower.router().await.open_lease(open).await.unwrap_err();
    assert_eq!(StatusReason::of(&err).known(), Some(ErrorReason::NotLeader), "{err:?}");
    assert_eq!(StatusReason::leader(&err).as_deref(), Some(leader.url().as_str()));
    // A stream is not forwarded: the operator is sent to the leader's Admin socket.
    let err = f_admin.watch_decisions(pb::WatchDecisionsRequest::default()).await.unwrap_err();
    assert_eq!(StatusReason::leader(&err).as_deref(), Some(leader.admin_url().as_str()));
    follower.stop().await;
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_prints_its_admin_socket_and_keeps_it_on_restart() {
    let (_engines, spec) = stubbed(&pd_workers(1)).await;
    let spec = spec.flags(["--admin-listen", "127.0.0.1:0"]);
    let mut control = spec.spawn().await.unwrap();
    let admin_addr = control.admin_addr.expect("admin= in the listening line");
    assert_ne!(admin_addr, control.addr);
    control.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap();
    let err =
        AdminClient::new(control.channel().await).get_config(pb::GetConfigRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    control.restart(false).await.unwrap();
    assert_eq!(control.admin_addr, Some(admin_addr));
    control.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap();
    control.stop().await.unwrap();
}

/// A mutual-TLS channel to `url` with `files`, when it connects.
async fn tls_channel(url: &str, files: &ClientFiles) -> Option<Channel> {
    let endpoint = Endpoint::from_shared(url.to_owned()).ok()?.tls_config(files.tonic().unwrap()).ok()?;
    endpoint.connect_timeout(Duration::from_secs(1)).connect().await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_both_sockets_need_a_certificate_and_followers_forward_to_https_admin() {
    let ca = TestCa::new("control");
    let server = ca.issue("control", &["127.0.0.1"]);
    let operator = ca.issue("operator", &["operator"]);
    let etcd = EtcdServer::start();
    let url = etcd.url();
    let (cert, key, ca_path) =
        (server.cert.display().to_string(), server.key.display().to_string(), ca.ca().display().to_string());
    let flags = [
        "--etcd",
        url.as_str(),
        "--engine-poll-ms",
        "0",
        "--admin-listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert.as_str(),
        "--tls-key",
        key.as_str(),
        "--tls-client-ca",
        ca_path.as_str(),
        "--tls-peer-ca",
        ca_path.as_str(),
    ];
    let first = ControlSpec::new(Workers::None).flags(flags).start().await.unwrap();
    let second = ControlSpec::new(Workers::None).flags(flags).start().await.unwrap();
    assert!(first.admin_url().starts_with("https://"), "{}", first.admin_url());
    let files = ClientFiles {
        ca: Some(ca.ca()),
        identity: Some(IdentityFiles { cert: operator.cert, key: operator.key }),
        server_name: None,
    };
    // Whoever leads: each replica's Admin socket answers with the leader's GetConfig, the
    // follower's by forwarding over TLS to the leader's https admin_url.
    let leaders = infera_testkit::poll(Duration::from_secs(30), "both to answer as the leader", async || {
        let mut seen = Vec::new();
        for control in [&first, &second] {
            let mut admin = AdminClient::new(tls_channel(&control.admin_url(), &files).await?);
            let config = admin.get_config(pb::GetConfigRequest {}).await.ok()?.into_inner();
            seen.push(config.leadership.filter(|l| l.role == "leader")?.url);
        }
        (seen[0] == seen[1]).then_some(seen)
    })
    .await
    .unwrap();
    assert!([first.url(), second.url()].contains(&leaders[0]), "{leaders:?}");
    // TLS on --listen too: Router over TLS, Admin not there.
    let grpc = tls_channel(&first.url(), &files).await.expect("TLS on --listen");
    assert_eq!(health(grpc.clone(), ROUTER).await, Ok(ServingStatus::Serving));
    let err = AdminClient::new(grpc).get_config(pb::GetConfigRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    // Without a client certificate, neither socket lets a caller in.
    let anonymous = ClientFiles { ca: Some(ca.ca()), identity: None, server_name: None };
    for url in [first.url(), first.admin_url()] {
        let refused = match tls_channel(&url, &anonymous).await {
            None => true,
            Some(channel) => health(channel, "").await.is_err(),
        };
        assert!(refused, "{url} served a caller without a certificate");
    }
}

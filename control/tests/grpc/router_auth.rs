//! Who may call the Router, and what a caller may touch: credentials (proxy tokens, client
//! certificates), ownership of leases and reservations, the bounds per identity, and how much one
//! identity's failure reports weigh in an ejection.

use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, LegFailure, ReleaseReason, router_client::RouterClient};
use infera_runtime::serve::tls::{ClientFiles, IdentityFiles};
use infera_testkit::tls::TestCa;
use infera_testkit::{RouterTokens, Token};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::harness::*;

fn reason(status: &tonic::Status) -> Option<ErrorReason> {
    StatusReason::of(status).known()
}

/// Control on `pd_workers(2)` asking the tokens of `tokens`, with `flags`.
async fn with_tokens(tokens: &RouterTokens, flags: &[&str]) -> Control {
    let path = tokens.path().display().to_string();
    let mut all = vec!["--router-tokens", path.as_str()];
    all.extend_from_slice(flags);
    Control::start(&pd_workers(2), &all).await
}

/// Opens a lease as `who`.
async fn lease_as(router: &mut RouterClient<Channel>, who: &Token) -> String {
    let open = pb::OpenLeaseRequest { holder: who.identity.clone(), ttl_ms: 60_000 };
    router.open_lease(who.request(open)).await.unwrap().into_inner().lease_id
}

/// What the ledger holds, as operators see it: every reservation and every target's load.
async fn ledger(control: &Control) -> (Vec<pb::Reservation>, Vec<(String, u32, u64, u64)>) {
    let mut admin = control.admin().await;
    let rows = admin.list_reservations(pb::ListReservationsRequest::default()).await.unwrap().into_inner();
    let targets = admin.list_targets(pb::ListTargetsRequest::default()).await.unwrap().into_inner();
    let loads = targets
        .targets
        .iter()
        .map(|t| {
            let target = t.target.as_ref().unwrap();
            (target.worker_id.clone(), target.dp_rank, t.held_requests, t.booked_input_tokens)
        })
        .collect();
    (rows.reservations, loads)
}

#[tokio::test]
async fn with_tokens_every_router_call_needs_one_and_admin_and_health_are_as_before() {
    let mut tokens = RouterTokens::new();
    let a = tokens.issue("proxy-a");
    let control = with_tokens(&tokens, &[]).await;
    let mut router = control.router().await;
    let open = || pb::OpenLeaseRequest { holder: "x".into(), ttl_ms: 0 };
    let refused = |status: tonic::Status| {
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
        assert_eq!(reason(&status), Some(ErrorReason::Unauthenticated), "{status:?}");
    };
    refused(router.open_lease(open()).await.unwrap_err());
    refused(router.keep_alive(pb::KeepAliveRequest { lease_id: "l-00000001-1".into() }).await.unwrap_err());
    refused(router.pick_decode(pick("l-00000001-1", "m", 1)).await.unwrap_err());
    refused(router.pick_many(pb::PickManyRequest::default()).await.unwrap_err());
    refused(router.release(release("r-00000001-1", ReleaseReason::Eof)).await.unwrap_err());
    refused(router.release_many(pb::ReleaseManyRequest::default()).await.unwrap_err());
    refused(router.list_targets(pb::ListTargetsRequest::default()).await.unwrap_err());
    let redeclare = pb::RedeclareRequest { lease_id: "l-00000001-1".into(), legs: Vec::new() };
    refused(router.redeclare(redeclare).await.unwrap_err());
    refused(router.close_lease(pb::CloseLeaseRequest { lease_id: "l-00000001-1".into() }).await.unwrap_err());
    // A wrong token, a token without `Bearer`, a revoked-looking prefix: refused alike.
    refused(router.open_lease(with_token(open(), "not-a-token-of-its")).await.unwrap_err());
    let mut bare = tonic::Request::new(open());
    bare.metadata_mut().insert("authorization", a.token.parse().unwrap());
    refused(router.open_lease(bare).await.unwrap_err());
    // The right one works, and nothing was booked by the refused calls.
    let lease = lease_as(&mut router, &a).await;
    router.pick_decode(a.request(pick(&lease, "m", 7))).await.unwrap();
    assert_eq!(ledger(&control).await.0.len(), 1);
    // Admin (no --admin-token here) and health take no Router credential.
    control.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(control.channel().await)
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await;
    assert!(health.is_ok());
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_control_router_authenticated"), Some(1.0));
    assert_eq!(
        sample(&metrics, "infera_control_router_unauthenticated_total{reason=\"missing\"}"),
        Some(9.0)
    );
    assert_eq!(
        sample(&metrics, "infera_control_router_unauthenticated_total{reason=\"unknown_token\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "infera_control_router_unauthenticated_total{reason=\"malformed\"}"),
        Some(1.0)
    );
    control.stop().await;
    // Without a credential configured the Router is open, and says so.
    let open_control = Control::start(&pd_workers(1), &[]).await;
    open_control.lease(0).await;
    assert_eq!(sample(&open_control.metrics().await, "infera_control_router_authenticated"), Some(0.0));
    open_control.stop().await;
}

#[tokio::test]
async fn another_identity_cannot_touch_a_lease_or_its_reservations_and_the_ledger_stays_exactly_as_it_was() {
    let mut tokens = RouterTokens::new();
    let (a, b) = (tokens.issue("proxy-a"), tokens.issue("proxy-b"));
    let control = with_tokens(&tokens, &["--eject-after-failures", "3"]).await;
    let mut router = control.router().await;
    let lease = lease_as(&mut router, &a).await;
    let decode = router.pick_decode(a.request(pick(&lease, "m", 900))).await.unwrap().into_inner();
    let prefill = router.pick_prefill(a.request(pick(&lease, "m", 900))).await.unwrap().into_inner();
    let before = ledger(&control).await;
    assert_eq!(before.0.len(), 2);
    assert!(before.0.iter().all(|r| r.owner == "proxy-a"), "{:?}", before.0);

    let not_found = |status: tonic::Status, why: ErrorReason| {
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
        assert_eq!(reason(&status), Some(why), "{status:?}");
    };
    let lease_id = || lease.clone();
    not_found(
        router.keep_alive(b.request(pb::KeepAliveRequest { lease_id: lease_id() })).await.unwrap_err(),
        ErrorReason::UnknownLease,
    );
    not_found(
        router.pick_decode(b.request(pick(&lease, "m", 1))).await.unwrap_err(),
        ErrorReason::UnknownLease,
    );
    for id in [&decode.reservation_id, &prefill.reservation_id] {
        let failed = pb::ReleaseRequest {
            reservation_id: id.clone(),
            reason: ReleaseReason::Failed as i32,
            failure: LegFailure::Connect as i32,
        };
        not_found(router.release(b.request(failed)).await.unwrap_err(), ErrorReason::UnknownReservation);
    }
    let many = pb::ReleaseManyRequest {
        releases: vec![
            release(&decode.reservation_id, ReleaseReason::Eof),
            release(&prefill.reservation_id, ReleaseReason::Cancelled),
        ],
    };
    let outcomes = router.release_many(b.request(many)).await.unwrap().into_inner().outcomes;
    assert_eq!(outcomes, [pb::ReleaseOutcome::UnknownReservation as i32; 2]);
    let legs = vec![pb::DeclaredLeg {
        kind: pb::PickKind::Decode as i32,
        target: Some(pb::Target { worker_id: "d".into(), dp_rank: 0 }),
        model: "m".into(),
        request_id: "phantom".into(),
        input_tokens: 100_000,
        age_ms: 0,
        previous_reservation_id: String::new(),
    }];
    let redeclare = pb::RedeclareRequest { lease_id: lease_id(), legs };
    not_found(router.redeclare(b.request(redeclare)).await.unwrap_err(), ErrorReason::UnknownLease);
    not_found(
        router.close_lease(b.request(pb::CloseLeaseRequest { lease_id: lease_id() })).await.unwrap_err(),
        ErrorReason::UnknownLease,
    );
    // Ids numbered as a control numbers them but without their tag name nothing, even for the
    // owner: `l-<epoch>-1` and `r-<epoch>-1` are not guessable any more.
    let epoch = lease.split('-').nth(1).unwrap();
    let guessed = pb::CloseLeaseRequest { lease_id: format!("l-{epoch}-1") };
    not_found(router.close_lease(a.request(guessed)).await.unwrap_err(), ErrorReason::UnknownLease);
    let guessed = release(&format!("r-{epoch}-1"), ReleaseReason::Eof);
    not_found(router.release(a.request(guessed)).await.unwrap_err(), ErrorReason::UnknownReservation);

    assert_eq!(ledger(&control).await, before, "the ledger is exactly as it was");
    let rows = control.admin().await.list_targets(pb::ListTargetsRequest::default()).await.unwrap();
    assert!(rows.into_inner().targets.iter().all(|t| t.health == "healthy" && t.consecutive_failures == 0));
    let metrics = control.metrics().await;
    for rpc in ["KeepAlive", "PickDecode", "Release", "Redeclare", "CloseLease"] {
        let series = format!("infera_router_foreign_ids_total{{rpc=\"{rpc}\"}}");
        assert!(sample(&metrics, &series).unwrap_or(0.0) >= 1.0, "{series}");
    }
    // The owner's lease and bookings are whole: it renews, releases and closes them.
    router.keep_alive(a.request(pb::KeepAliveRequest { lease_id: lease_id() })).await.unwrap();
    let done = router.release(a.request(release(&decode.reservation_id, ReleaseReason::Eof))).await.unwrap();
    assert!(!done.into_inner().already_released);
    let closed = router.close_lease(a.request(pb::CloseLeaseRequest { lease_id: lease_id() })).await.unwrap();
    assert_eq!(closed.into_inner().released_reservations, 1);
    assert_eq!(ledger(&control).await.0.len(), 0);
    control.stop().await;
}

#[tokio::test]
async fn open_leases_are_bounded_per_identity() {
    let mut tokens = RouterTokens::new();
    let (a, b) = (tokens.issue("proxy-a"), tokens.issue("proxy-b"));
    let control = with_tokens(&tokens, &["--max-leases-per-identity", "2"]).await;
    let mut router = control.router().await;
    let first = lease_as(&mut router, &a).await;
    lease_as(&mut router, &a).await;
    let open = pb::OpenLeaseRequest { holder: "a".into(), ttl_ms: 0 };
    let err = router.open_lease(a.request(open.clone())).await.unwrap_err();
    assert_eq!(
        (err.code(), reason(&err)),
        (Code::ResourceExhausted, Some(ErrorReason::TooManyLeases)),
        "{err:?}"
    );
    assert!(err.message().contains("--max-leases-per-identity"), "{err:?}");
    // Another identity is not held back; a closed lease makes room.
    lease_as(&mut router, &b).await;
    router.close_lease(a.request(pb::CloseLeaseRequest { lease_id: first })).await.unwrap();
    router.open_lease(a.request(open)).await.unwrap();
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_bound_refusals_total{bound=\"leases\"}"), Some(1.0));
    assert_eq!(sample(&metrics, "infera_router_leases"), Some(3.0));
    assert_eq!(sample(&metrics, "infera_router_identity_leases{identity=\"proxy-a\"}"), Some(2.0));
    assert_eq!(sample(&metrics, "infera_router_identity_leases{identity=\"proxy-b\"}"), Some(1.0));
    // A holder name is bounded too (each lease is written to etcd by it).
    let long = pb::OpenLeaseRequest { holder: "h".repeat(257), ttl_ms: 0 };
    let err = router.open_lease(b.request(long)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    control.stop().await;
}

fn leg(request: &str, rank: u32, model: &str) -> pb::DeclaredLeg {
    pb::DeclaredLeg {
        kind: pb::PickKind::Decode as i32,
        target: Some(pb::Target { worker_id: "d".into(), dp_rank: rank }),
        model: model.into(),
        request_id: request.into(),
        input_tokens: 100,
        age_ms: 10,
        previous_reservation_id: String::new(),
    }
}

#[tokio::test]
async fn a_redeclare_is_bounded_in_bytes_and_its_legs_checked_against_the_view_and_the_rank_cap() {
    let mut tokens = RouterTokens::new();
    let a = tokens.issue("proxy-a");
    let flags = ["--max-redeclare-bytes", "262144", "--max-requests-per-rank", "2"];
    let control = with_tokens(&tokens, &flags).await;
    let mut router = control.router().await;
    let lease = lease_as(&mut router, &a).await;
    // Over the bound: refused whole, nothing booked.
    let huge: Vec<pb::DeclaredLeg> = (0..10_000).map(|i| leg(&format!("phantom-{i:05}"), 0, "m")).collect();
    let req = pb::RedeclareRequest { lease_id: lease.clone(), legs: huge };
    assert!(prost::Message::encoded_len(&req) > 262_144);
    let err = router.redeclare(a.request(req)).await.unwrap_err();
    assert_eq!(
        (err.code(), reason(&err)),
        (Code::ResourceExhausted, Some(ErrorReason::RedeclareTooLarge)),
        "{err:?}"
    );
    assert!(ledger(&control).await.0.is_empty());
    // Under it: each leg checked. Rank 0 takes two (its cap), a third is refused; a leg of
    // another model, or on a rank the worker does not have, is no target of this view.
    let legs = vec![
        leg("one", 0, "m"),
        leg("two", 0, "m"),
        leg("three", 0, "m"),
        leg("other-model", 1, "agg"),
        leg("no-such-rank", 9, "m"),
    ];
    let results = router
        .redeclare(a.request(pb::RedeclareRequest { lease_id: lease.clone(), legs }))
        .await
        .unwrap()
        .into_inner()
        .results;
    let what: Vec<&str> = results
        .iter()
        .map(|r| match (r.reservation_id.is_empty(), r.unknown_target, r.over_capacity) {
            (false, false, false) => "booked",
            (true, true, false) => "unknown",
            (true, false, true) => "full",
            _ => panic!("{r:?}"),
        })
        .collect();
    assert_eq!(what, ["booked", "booked", "full", "unknown", "unknown"]);
    assert_eq!(held(&control, "d").await[0], (2, 200));
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_bound_refusals_total{bound=\"redeclare_bytes\"}"), Some(1.0));
    assert_eq!(
        sample(&metrics, "infera_router_bound_refusals_total{bound=\"redeclare_over_capacity\"}"),
        Some(1.0)
    );
    control.stop().await;
}

#[tokio::test]
async fn forged_failure_reports_of_one_identity_do_not_eject_a_worker_another_uses() {
    let mut tokens = RouterTokens::new();
    let (a, x) = (tokens.issue("proxy-a"), tokens.issue("attacker"));
    let control = with_tokens(&tokens, &["--eject-after-failures", "3", "--decode-input-demand", "on"]).await;
    let mut router = control.router().await;
    let (lease_a, lease_x) = (lease_as(&mut router, &a).await, lease_as(&mut router, &x).await);
    // proxy-a serves from both of d's ranks: the second pick goes to the rank the first left empty.
    let mut served = Vec::new();
    for i in 0..2 {
        let p = router.pick_decode(a.request(pick(&lease_a, "m", 10 + i))).await.unwrap().into_inner();
        served.push(p);
    }
    assert_ne!(target_of(&served[0]), target_of(&served[1]));
    for p in served {
        router.release(a.request(release(&p.reservation_id, ReleaseReason::Eof))).await.unwrap();
    }
    // The attacker books its own legs on d and reports each as a refused connection (which
    // counts against every rank of the worker): ten in a row, more than three times the bound.
    for i in 0..10 {
        let p = router.pick_decode(x.request(pick(&lease_x, "m", 20 + i))).await.unwrap().into_inner();
        let failed = pb::ReleaseRequest {
            reservation_id: p.reservation_id,
            reason: ReleaseReason::Failed as i32,
            failure: LegFailure::Connect as i32,
        };
        router.release(x.request(failed)).await.unwrap();
    }
    let rows = control.admin().await.list_targets(pb::ListTargetsRequest::default()).await.unwrap();
    let d: Vec<&pb::TargetStatus> =
        rows.get_ref().targets.iter().filter(|t| t.target.as_ref().unwrap().worker_id == "d").collect();
    assert!(d.iter().all(|t| t.health == "healthy"), "{d:?}");
    let metrics = control.metrics().await;
    assert_eq!(sample(&metrics, "infera_router_discounted_failures_total"), Some(20.0));
    assert_eq!(sample(&metrics, "infera_router_ejections_total{cause=\"connect\"}").unwrap_or(0.0), 0.0);
    // proxy-a's picks still land on d.
    router.pick_decode(a.request(pick(&lease_a, "m", 5))).await.unwrap();
    control.stop().await;
}

/// A mutual-TLS channel to `url` showing `client`.
async fn tls_channel(url: &str, ca: &TestCa, client: &infera_testkit::tls::Issued) -> Channel {
    let files = ClientFiles {
        ca: Some(ca.ca()),
        identity: Some(IdentityFiles { cert: client.cert.clone(), key: client.key.clone() }),
        server_name: None,
    };
    let endpoint = Endpoint::from_shared(url.to_owned()).unwrap().tls_config(files.tonic().unwrap()).unwrap();
    endpoint.connect().await.unwrap()
}

#[tokio::test]
async fn a_client_certificate_names_its_holder_and_owns_what_it_opens() {
    let ca = TestCa::new("router");
    let server = ca.issue("control", &["127.0.0.1"]);
    let kit = ca.issue("kit", &["kit.test"]);
    let (proxy_a, proxy_b) = (ca.issue("proxy-a", &["proxy.test"]), ca.issue("proxy-b", &["proxy.test"]));
    let (engines, spec) = stubbed(&pd_workers(2)).await;
    let control = spec.tls(&ca, &server).client_certificates(&ca, &kit).start().await.unwrap();
    control.wait_targets(6).await.unwrap();
    let mut a = RouterClient::new(tls_channel(&control.url(), &ca, &proxy_a).await);
    let mut b = RouterClient::new(tls_channel(&control.url(), &ca, &proxy_b).await);
    let open = pb::OpenLeaseRequest { holder: "a".into(), ttl_ms: 60_000 };
    let lease = a.open_lease(open).await.unwrap().into_inner().lease_id;
    let booked = a.pick_decode(pick(&lease, "m", 40)).await.unwrap().into_inner();
    let rows = control.admin().await.list_reservations(pb::ListReservationsRequest::default()).await.unwrap();
    assert_eq!(rows.into_inner().reservations[0].owner, "proxy-a", "the certificate's common name");
    let err = b.release(release(&booked.reservation_id, ReleaseReason::Eof)).await.unwrap_err();
    assert_eq!(reason(&err), Some(ErrorReason::UnknownReservation), "{err:?}");
    let err = b.keep_alive(pb::KeepAliveRequest { lease_id: lease.clone() }).await.unwrap_err();
    assert_eq!(reason(&err), Some(ErrorReason::UnknownLease), "{err:?}");
    a.release(release(&booked.reservation_id, ReleaseReason::Eof)).await.unwrap();
    assert_eq!(sample(&control.metrics().await.unwrap(), "infera_control_router_authenticated"), Some(1.0));
    drop(engines);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_rotation_takes_effect_on_sighup_without_a_restart() {
    // A process: SIGHUP goes to it alone.
    let mut tokens = RouterTokens::new();
    let old = tokens.issue("proxy-a");
    let (_engines, spec) = stubbed(&pd_workers(1)).await;
    let mut control = spec.router_tokens(&tokens).spawn().await.unwrap();
    let mut router = control.router().await;
    let lease = lease_as(&mut router, &old).await;
    // The new token is added beside the old one; the proxy moves to it; the old one goes.
    let new = tokens.issue("proxy-a");
    control.node.process().unwrap().hangup().unwrap();
    let keep = |t: &Token| t.request(pb::KeepAliveRequest { lease_id: lease.clone() });
    eventually(Duration::from_secs(10), "the new token to be taken", || {
        let (mut router, req) = (router.clone(), keep(&new));
        async move { router.keep_alive(req).await.is_ok() }
    })
    .await;
    router.keep_alive(keep(&old)).await.unwrap();
    tokens.revoke(&old);
    control.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the old token to be refused", || {
        let (mut router, req) = (router.clone(), keep(&old));
        async move { router.keep_alive(req).await.is_err_and(|e| e.code() == Code::Unauthenticated) }
    })
    .await;
    // Same identity: the lease opened with the old token is the new token's too.
    router.keep_alive(keep(&new)).await.unwrap();
    // A file that does not load keeps the tokens in force.
    std::fs::write(tokens.path(), "not [ toml").unwrap();
    control.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the failed reload to be counted", || async {
        let m = control.metrics().await.unwrap_or_default();
        sample(&m, "infera_control_router_token_reloads_total{outcome=\"error\"}") == Some(1.0)
    })
    .await;
    router.keep_alive(keep(&new)).await.unwrap();
    assert_eq!(
        sample(
            &control.metrics().await.unwrap(),
            "infera_control_router_token_reloads_total{outcome=\"ok\"}"
        ),
        Some(2.0)
    );
    control.stop().await.unwrap();
}

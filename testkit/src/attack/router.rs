//! Attacks on control's Router port: calls without a credential, a stolen credential aimed at
//! another identity's leases and reservations (known and guessed ids), forged failure reports,
//! a lease flood and phantom re-declared legs.

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb::{self, LegFailure, ReleaseReason, router_client::RouterClient};
use tonic::Code;
use tonic::transport::Channel;

use super::target::{MAX_PER_RANK, MODEL, chat_body, secret};
use super::{Report, Scale, Target};
use crate::credentials::Token;
use crate::http::metric_sum;

fn bare<T>(msg: T) -> tonic::Request<T> {
    tonic::Request::new(msg)
}

fn with_bearer<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("hex"));
    req
}

fn pick(lease: &str, request: &str) -> pb::PickRequest {
    pb::PickRequest {
        lease_id: lease.into(),
        request_id: request.into(),
        model: MODEL.into(),
        input_tokens: 100,
        ..pb::PickRequest::default()
    }
}

fn release(id: &str, reason: ReleaseReason, failure: LegFailure) -> pb::ReleaseRequest {
    pb::ReleaseRequest { reservation_id: id.into(), reason: reason as i32, failure: failure as i32 }
}

async fn lease_as(router: &mut RouterClient<Channel>, who: &Token) -> anyhow::Result<String> {
    let open = pb::OpenLeaseRequest { holder: who.identity.clone(), ttl_ms: 60_000 };
    Ok(router.open_lease(who.request(open)).await?.into_inner().lease_id)
}

/// Every reservation control holds, as an operator lists them.
async fn reservations(t: &Target) -> Vec<pb::Reservation> {
    let mut admin = t.cluster.control.admin().await;
    admin
        .list_reservations(pb::ListReservationsRequest::default())
        .await
        .map(|r| r.into_inner().reservations)
        .unwrap_or_default()
}

fn code_of<T>(r: &Result<T, tonic::Status>) -> Option<Code> {
    r.as_ref().err().map(tonic::Status::code)
}

/// OpenLease, ListTargets, Release, Redeclare and CloseLease with no credential and with a
/// made-up token: each `UNAUTHENTICATED`, no lease opened.
pub(super) async fn without_credential(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "router-without-credential",
        "OpenLease, ListTargets, Release, Redeclare, CloseLease with no token and with a made-up one (10 calls)",
    );
    let mut router = t.router().await?;
    let leases_before = metric_sum(&t.cluster.control.metrics().await?, "infera_router_leases", "");
    let made_up = secret();
    let mut codes = Vec::new();
    for token in [None, Some(made_up.as_str())] {
        let req = |m| match token {
            Some(tok) => with_bearer(m, tok),
            None => bare(m),
        };
        let open = pb::OpenLeaseRequest { holder: "intruder".into(), ttl_ms: 60_000 };
        codes.push(code_of(&router.open_lease(req(open)).await));
        let list = |m| match token {
            Some(tok) => with_bearer(m, tok),
            None => bare(m),
        };
        codes.push(code_of(&router.list_targets(list(pb::ListTargetsRequest::default())).await));
        let rel = release("r-00000001-1", ReleaseReason::Eof, LegFailure::Unspecified);
        codes.push(code_of(
            &router
                .release(match token {
                    Some(tok) => with_bearer(rel, tok),
                    None => bare(rel),
                })
                .await,
        ));
        let redeclare = pb::RedeclareRequest { lease_id: "l-00000001-1".into(), legs: Vec::new() };
        codes.push(code_of(
            &router
                .redeclare(match token {
                    Some(tok) => with_bearer(redeclare, tok),
                    None => bare(redeclare),
                })
                .await,
        ));
        let close = pb::CloseLeaseRequest { lease_id: "l-00000001-1".into() };
        codes.push(code_of(
            &router
                .close_lease(match token {
                    Some(tok) => with_bearer(close, tok),
                    None => bare(close),
                })
                .await,
        ));
    }
    let refused = codes.iter().filter(|c| **c == Some(Code::Unauthenticated)).count();
    r = r.answered(format!("{refused} of {} UNAUTHENTICATED", codes.len()));
    r.expect(refused == codes.len(), || format!("codes {codes:?}"));
    let leases_after = metric_sum(&t.cluster.control.metrics().await?, "infera_router_leases", "");
    r.expect(leases_after == leases_before, || format!("leases {leases_before} → {leases_after}"));
    Ok(r)
}

/// The rogue holds the victim's lease and reservation ids (leaked, say, from a log) and guesses
/// others: KeepAlive, CloseLease, Release and Redeclare on them change nothing.
pub(super) async fn foreign_ids(t: &Target, s: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "router-foreign-ids",
        format!(
            "with its own valid token: KeepAlive/CloseLease/Redeclare on another identity's lease, Release of its 4 reservations and of {} guessed ids",
            s.guesses
        ),
    );
    let mut router = t.router().await?;
    let victim_lease = lease_as(&mut router, &t.victim).await?;
    let mut held = Vec::new();
    for i in 0..4 {
        let p = router
            .pick_decode(t.victim.request(pick(&victim_lease, &format!("victim-{i}"))))
            .await?
            .into_inner();
        held.push(p.reservation_id);
    }
    let before = reservations(t).await;
    let rogue_lease = lease_as(&mut router, &t.rogue).await?;
    let own = router
        .pick_decode(t.rogue.request(pick(&rogue_lease, "rogue-own")))
        .await?
        .into_inner()
        .reservation_id;
    let mut outcomes = Vec::new();
    outcomes.push(code_of(
        &router.keep_alive(t.rogue.request(pb::KeepAliveRequest { lease_id: victim_lease.clone() })).await,
    ));
    outcomes.push(code_of(
        &router.close_lease(t.rogue.request(pb::CloseLeaseRequest { lease_id: victim_lease.clone() })).await,
    ));
    let legs = vec![pb::DeclaredLeg {
        kind: pb::PickKind::Decode as i32,
        target: Some(pb::Target { worker_id: "decode-1".into(), dp_rank: 0 }),
        model: MODEL.into(),
        request_id: "stolen".into(),
        input_tokens: 1,
        age_ms: 1,
        previous_reservation_id: held[0].clone(),
    }];
    outcomes.push(code_of(
        &router
            .redeclare(t.rogue.request(pb::RedeclareRequest { lease_id: victim_lease.clone(), legs }))
            .await,
    ));
    for id in &held {
        let rel = release(id, ReleaseReason::Failed, LegFailure::Connect);
        outcomes.push(code_of(&router.release(t.rogue.request(rel)).await));
    }
    // Guesses: the rogue's own id with its sequence moved and a random tag, and the victim's ids
    // with their tag changed.
    let (prefix, _) = own.rsplit_once('-').unwrap_or((&own, ""));
    let (epoch, _) = prefix.rsplit_once('-').unwrap_or((prefix, ""));
    for i in 0..s.guesses {
        let tag: u64 = rand::random::<u64>() | 1;
        let guess = if i % 2 == 0 {
            format!("{epoch}-{}-{tag:016x}", i / 2 + 1)
        } else {
            let id = &held[i % held.len()];
            let (known, _) = id.rsplit_once('-').unwrap_or((id, ""));
            format!("{known}-{tag:016x}")
        };
        let rel = release(&guess, ReleaseReason::Eof, LegFailure::Unspecified);
        outcomes.push(code_of(&router.release(t.rogue.request(rel)).await));
    }
    let not_found = outcomes.iter().filter(|c| **c == Some(Code::NotFound)).count();
    r = r.answered(format!(
        "{not_found} of {} NOT_FOUND; the victim's reservations untouched",
        outcomes.len()
    ));
    let invalid = outcomes.iter().filter(|c| **c == Some(Code::InvalidArgument)).count();
    r.expect(not_found + invalid == outcomes.len(), || format!("codes: {outcomes:?}"));
    let after = reservations(t).await;
    let victims = |rows: &[pb::Reservation]| {
        let mut ids: Vec<String> =
            rows.iter().filter(|x| x.owner == "victim").map(|x| x.reservation_id.clone()).collect();
        ids.sort();
        ids
    };
    r.expect(victims(&before) == victims(&after) && victims(&after).len() == 4, || {
        format!("the victim's reservations went from {:?} to {:?}", victims(&before), victims(&after))
    });
    router.close_lease(t.rogue.request(pb::CloseLeaseRequest { lease_id: rogue_lease })).await?;
    router.close_lease(t.victim.request(pb::CloseLeaseRequest { lease_id: victim_lease })).await?;
    Ok(r)
}

/// Proxies serve from every decode worker; then the rogue books legs on them and reports each
/// as a refused connection, three times the ejection bound: no worker is ejected.
pub(super) async fn forged_failures(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let reports = 12;
    let mut r = Report::new(
        "router-forged-failures",
        format!(
            "{reports} CONNECT failure reports on legs of its own, against workers the proxies use (--eject-after-failures 3)"
        ),
    );
    // Witnesses: the proxies' own legs end well on every decode worker.
    for i in 0..40 {
        let mut served = true;
        for sim in t.cluster.sims.iter().filter(|s| s.record.id.as_str().starts_with("decode")) {
            served &= !sim.requests().await.is_empty();
        }
        if served && i >= 4 {
            break;
        }
        let (status, body) = t.chat(&t.alice, &chat_body("witness", 2, false)).await?;
        anyhow::ensure!(status.is_success(), "a witness request failed: {status} {body}");
    }
    let mut router = t.router().await?;
    let lease = lease_as(&mut router, &t.rogue).await?;
    let ejections_before =
        metric_sum(&t.cluster.control.metrics().await?, "infera_router_ejections_total", "");
    for i in 0..reports {
        let p = router.pick_decode(t.rogue.request(pick(&lease, &format!("forged-{i}")))).await?.into_inner();
        router
            .release(t.rogue.request(release(&p.reservation_id, ReleaseReason::Failed, LegFailure::Connect)))
            .await?;
    }
    let metrics = t.cluster.control.metrics().await?;
    let ejections = metric_sum(&metrics, "infera_router_ejections_total", "") - ejections_before;
    let discounted = metric_sum(&metrics, "infera_router_discounted_failures_total", "");
    let rows = t.cluster.control.targets().await;
    let unhealthy: Vec<String> = rows
        .iter()
        .filter(|row| row.health != "healthy")
        .map(|row| format!("{:?} {}", row.target, row.health))
        .collect();
    r = r.answered(format!(
        "{ejections} ejections, {discounted} failure reports discounted, every target healthy: {}",
        unhealthy.is_empty()
    ));
    r.expect(ejections == 0.0 && unhealthy.is_empty(), || format!("ejected: {unhealthy:?}"));
    router.close_lease(t.rogue.request(pb::CloseLeaseRequest { lease_id: lease })).await?;
    Ok(r)
}

/// The rogue opens lease after lease (each would be written to etcd): at most
/// `--max-leases-per-identity` open, the rest `RESOURCE_EXHAUSTED`.
pub(super) async fn lease_flood(t: &Target, s: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "router-lease-flood",
        format!("{} OpenLease calls with its own valid token, each a new holder name", s.leases),
    );
    let mut router = t.router().await?;
    let (mut opened, mut refused, mut other) = (Vec::new(), 0, Vec::new());
    for i in 0..s.leases {
        let open = pb::OpenLeaseRequest { holder: format!("flood-{i}"), ttl_ms: 60_000 };
        match router.open_lease(t.rogue.request(open)).await {
            Ok(lease) => opened.push(lease.into_inner().lease_id),
            Err(e)
                if e.code() == Code::ResourceExhausted
                    && StatusReason::of(&e).known() == Some(ErrorReason::TooManyLeases) =>
            {
                refused += 1
            }
            Err(e) => other.push(format!("{:?}", e.code())),
        }
    }
    let metrics = t.cluster.control.metrics().await?;
    let held = metric_sum(&metrics, "infera_router_identity_leases", "identity=\"rogue\"");
    let in_etcd = match t.cluster.etcd.as_ref() {
        Some(etcd) => {
            etcd.infera_keys().await.keys().filter(|k| k.contains("/control/proxies/flood-")).count()
        }
        None => 0,
    };
    r = r.answered(format!(
        "{} opened, {refused} TOO_MANY_LEASES, {held} held by the identity, {in_etcd} in etcd",
        opened.len()
    ));
    r.expect(opened.len() <= s.max_leases && held <= s.max_leases as f64 && other.is_empty(), || {
        format!("{} leases opened (bound {}), other answers {other:?}", opened.len(), s.max_leases)
    });
    r.expect(in_etcd <= s.max_leases, || format!("{in_etcd} holder keys written to etcd"));
    for lease in opened {
        router.close_lease(t.rogue.request(pb::CloseLeaseRequest { lease_id: lease })).await?;
    }
    Ok(r)
}

fn phantom(i: usize, worker: &str) -> pb::DeclaredLeg {
    pb::DeclaredLeg {
        kind: pb::PickKind::Decode as i32,
        target: Some(pb::Target { worker_id: worker.into(), dp_rank: 0 }),
        model: MODEL.into(),
        request_id: format!("phantom-{i:07}"),
        input_tokens: 100_000,
        age_ms: 1,
        previous_reservation_id: String::new(),
    }
}

/// The rogue re-declares phantom legs: a call over `--max-redeclare-bytes` is refused whole,
/// legs on no known target are refused, and legs on a real rank stop at its cap; clients are
/// still served meanwhile, and closing the lease frees everything.
pub(super) async fn phantom_redeclare(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "router-phantom-redeclare",
        "Redeclare of 30,000 legs (1.4 MB, over --max-redeclare-bytes 1 MiB), then 100 legs on a worker that does not exist and 1,000 on decode-1 rank 0 (cap 64)",
    );
    let mut router = t.router().await?;
    let lease = lease_as(&mut router, &t.rogue).await?;
    let huge: Vec<pb::DeclaredLeg> = (0..30_000).map(|i| phantom(i, "decode-1")).collect();
    let too_large =
        router.redeclare(t.rogue.request(pb::RedeclareRequest { lease_id: lease.clone(), legs: huge })).await;
    // Refused whole: by control's Redeclare bound, or by the gRPC message limit before it.
    let refused_whole =
        matches!(&too_large, Err(e) if matches!(e.code(), Code::ResourceExhausted | Code::OutOfRange));
    let ghosts: Vec<pb::DeclaredLeg> = (0..100).map(|i| phantom(i, "ghost")).collect();
    let ghost_results = router
        .redeclare(t.rogue.request(pb::RedeclareRequest { lease_id: lease.clone(), legs: ghosts }))
        .await?
        .into_inner()
        .results;
    let unknown = ghost_results.iter().filter(|x| x.unknown_target && x.reservation_id.is_empty()).count();
    let legs: Vec<pb::DeclaredLeg> = (0..1_000).map(|i| phantom(100 + i, "decode-1")).collect();
    let results = router
        .redeclare(t.rogue.request(pb::RedeclareRequest { lease_id: lease.clone(), legs }))
        .await?
        .into_inner()
        .results;
    let booked = results.iter().filter(|x| !x.reservation_id.is_empty()).count() as u64;
    let refused_over_cap = results.iter().filter(|x| x.over_capacity).count();
    // Held by phantoms, the rank serves nobody else; the proxies route around it.
    let (status, body) = t.chat(&t.alice, &chat_body("while phantoms are held", 2, false)).await?;
    r = r.answered(format!(
        "over-size call refused whole: {refused_whole}; {unknown}/100 unknown-target legs refused; {booked}/1000 booked on the rank (cap {MAX_PER_RANK}), {refused_over_cap} refused over it; a client request meanwhile: {status}"
    ));
    r.expect(refused_whole, || match &too_large {
        Ok(resp) => format!("the oversized Redeclare was taken: {} results", resp.get_ref().results.len()),
        Err(e) => format!("the oversized Redeclare answered {:?}", e.code()),
    });
    r.expect(unknown == 100, || format!("{unknown} of 100 ghost legs refused"));
    r.expect(booked <= MAX_PER_RANK && booked as usize + refused_over_cap == 1_000, || {
        format!("{booked} phantom legs booked on one rank, {refused_over_cap} refused")
    });
    r.expect(status.is_success(), || format!("a client got {status}: {body}"));
    router.close_lease(t.rogue.request(pb::CloseLeaseRequest { lease_id: lease })).await?;
    Ok(r)
}

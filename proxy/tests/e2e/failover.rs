//! Control HA under chaos: 3 replicas in network namespaces of their own, etcd, 2 proxies and a
//! 1P1D sim deployment under closed-loop streaming load. The leader is killed 5 times at random
//! moments, every replica is restarted at once, the leader is paused for longer than its lease
//! and resumed, and the leader is cut off from etcd while the proxies still reach it. No client
//! request may fail; after each event the new leader's held requests per decode rank must equal
//! what the engine runs and queues; the deposed leader must not book; at the end every target is
//! at 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use infera_proto::pb;
use infera_testkit::netns::{self, HostAddress};
use infera_testkit::{EtcdServer, ProxySpec, Registration, Replicas, SimSpec, poll};
use rand::{Rng, SeedableRng, rngs::SmallRng};

use crate::harness::*;

/// The leader lease TTL (the default) and the proxies' lease TTL.
const LEADER_TTL: Duration = Duration::from_secs(2);
const PROXY_LEASE_TTL_MS: u64 = 5_000;
/// Once a new leader is elected, its held requests equal the engine's within one proxy lease
/// TTL: each proxy moves to it and re-declares within that.
const CONSISTENT_WITHIN: Duration = Duration::from_millis(PROXY_LEASE_TTL_MS);
const CLIENTS: usize = 8;

/// The decode rows of replica `i`'s own ListTargets, if it answers.
async fn decode_rows(replicas: &Replicas, i: usize) -> Option<Vec<pb::TargetStatus>> {
    let channel = tonic::transport::Endpoint::from_shared(replicas.controls[i].url())
        .ok()?
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .ok()?;
    let req = pb::ListTargetsRequest { role: pb::Role::Decode as i32, ..Default::default() };
    let rows = pb::admin_client::AdminClient::new(channel).list_targets(req).await.ok()?.into_inner();
    Some(rows.targets)
}

/// Waits until the leader's held requests on every decode rank equal what the engine runs and
/// queues there (its own fresh reading); gives how long that took.
async fn leader_matches_the_engine(replicas: &Replicas, event: &str) -> Duration {
    let started = Instant::now();
    poll(
        CONSISTENT_WITHIN,
        &format!("after {event}: the leader's held requests to equal the engine's"),
        async || {
            let leader = replicas.leader().await?;
            let rows = decode_rows(replicas, leader).await?;
            let busy: u64 = rows.iter().map(|r| r.held_requests).sum();
            let fresh = rows.iter().all(|r| r.engine.as_ref().is_some_and(|e| e.age_ms < 300));
            (fresh && busy > 0 && rows.iter().all(|r| r.drift_requests == 0)).then_some(())
        },
    )
    .await
    .unwrap();
    started.elapsed()
}

/// `infera_router_picks_total{outcome="ok"}` of replica `i`.
async fn booked_picks(replicas: &Replicas, i: usize) -> f64 {
    let text = replicas.controls[i].metrics().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("infera_router_picks_total{") && l.contains("outcome=\"ok\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ledger_survives_kills_a_full_restart_a_pause_and_a_partition_of_the_leader() {
    assert!(netns::available(), "this test needs root and `ip` (network namespaces)");
    let host = HostAddress::create().unwrap();
    let ip = host.ip;
    let etcd = tokio::task::spawn_blocking(move || EtcdServer::start_on(ip.into())).await.unwrap();
    let prefill = sim(SimSpec::prefill("prefill-0", MODEL)).host(ip.to_string()).start().await.unwrap();
    let decode = sim(SimSpec::decode("decode-0", MODEL, 2)).host(ip.to_string()).start().await.unwrap();
    let _registered: Vec<Registration> = [&prefill, &decode]
        .iter()
        .map(|s| Registration::start(vec![etcd.url()], s.record.clone(), Duration::from_secs(10)))
        .collect();
    let flags = ["--decode-input-demand", "on", "--lease-ttl-ms", "5000"];
    let mut replicas = Replicas::start(&etcd.url(), 3, &flags, true).await.unwrap();
    replicas.wait_leader(None).await.unwrap();
    let mut running = Vec::new();
    for _ in 0..2 {
        let spec = ProxySpec::new(replicas.urls()).flag("--lease-ttl-ms", PROXY_LEASE_TTL_MS);
        let proxy = spec.start().await.unwrap();
        proxy.wait_ready(MODEL).await.unwrap();
        running.push(proxy);
    }
    let proxies: Vec<String> = running.iter().map(|p| p.url.clone()).collect();

    // Closed loop: each client streams one chat after another until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
        let url = format!("{}/v1/chat/completions", proxies[c % proxies.len()]);
        clients.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(100 + c as u64);
            while !stop.load(Ordering::Relaxed) {
                let (status, text) = post_json(&url, &chat(rng.random_range(500..2_500), true), &[]).await;
                if status == http::StatusCode::OK
                    && text.contains("data: [DONE]")
                    && !text.contains("\"error\"")
                {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("client {c}: {status} {}", &text[..text.len().min(300)]);
                }
            }
        }));
    }
    let mut rng = SmallRng::seed_from_u64(13);
    let mut took = Vec::new();
    took.push(leader_matches_the_engine(&replicas, "the start").await);

    // 1. The leader killed (kill -9) five times, at random moments; it comes back as a follower.
    for round in 0..5 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1_500))).await;
        let leader = replicas.wait_leader(None).await.unwrap();
        replicas.kill(leader);
        let next = replicas.wait_leader(Some(leader)).await.unwrap();
        took.push(leader_matches_the_engine(&replicas, &format!("kill {round}")).await);
        replicas.restart(leader).unwrap();
        assert_ne!(next, leader);
    }

    // 2. Every replica killed and started again at once.
    for i in 0..3 {
        replicas.kill(i);
    }
    for i in 0..3 {
        replicas.restart(i).unwrap();
    }
    replicas.wait_leader(None).await.unwrap();
    took.push(leader_matches_the_engine(&replicas, "the full restart").await);

    // 3. The leader paused (SIGSTOP) for longer than its lease, then resumed: it must not book.
    let paused = replicas.wait_leader(None).await.unwrap();
    let before = booked_picks(&replicas, paused).await;
    replicas.pause(paused).unwrap();
    replicas.wait_leader(Some(paused)).await.unwrap();
    tokio::time::sleep(LEADER_TTL).await;
    replicas.resume(paused).unwrap();
    // Resumed past its deadline, it refuses at once, before it has heard that it lost.
    let open = pb::OpenLeaseRequest { holder: "probe".into(), ttl_ms: 0 };
    let refused = replicas.controls[paused].router().await.open_lease(open).await.unwrap_err();
    assert_eq!(
        infera_proto::error::StatusReason::of(&refused).known(),
        Some(infera_proto::error::ErrorReason::NotLeader)
    );
    took.push(leader_matches_the_engine(&replicas, "the pause").await);
    poll(Duration::from_secs(10), "the resumed leader to follow", async || {
        (replicas.leads(paused).await == Some(false)).then_some(())
    })
    .await
    .unwrap();
    // Picks it had booked when the signal stopped it are answered (and re-declared by their
    // proxies); none is booked after.
    let deposed = booked_picks(&replicas, paused).await;
    assert!(deposed - before <= (2 * CLIENTS) as f64, "{before} → {deposed}: more than the picks in flight");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(booked_picks(&replicas, paused).await, deposed, "the deposed leader booked after its pause");

    // 4. The leader cut off from etcd while the proxies still reach it.
    let cut = replicas.wait_leader(None).await.unwrap();
    replicas.netns[cut].cut(ip).unwrap();
    let next = replicas.wait_leader(Some(cut)).await.unwrap();
    let fenced = booked_picks(&replicas, cut).await;
    took.push(leader_matches_the_engine(&replicas, "the partition").await);
    assert_eq!(booked_picks(&replicas, cut).await, fenced, "the cut-off leader booked beside {next}");
    replicas.netns[cut].heal(ip).unwrap();
    poll(Duration::from_secs(15), "the healed replica to follow", async || {
        (replicas.leads(cut).await == Some(false)).then_some(())
    })
    .await
    .unwrap();

    // The end: no request failed, and nothing is left booked or running.
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    eprintln!(
        "requests: {} ok, {} failed; consistent again after {took:?}",
        done.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    if failed.load(Ordering::Relaxed) > 0 {
        for i in 0..3 {
            let text = replicas.controls[i].metrics().await.unwrap_or_default();
            for l in text.lines().filter(|l| {
                l.starts_with("infera_router_ejections_total")
                    || l.starts_with("infera_router_breaker")
                    || l.starts_with("infera_router_targets")
                    || l.starts_with("infera_router_engine_facts_failures")
            }) {
                eprintln!("replica {i}: {l}");
            }
        }
        for (i, proxy) in running.iter_mut().enumerate() {
            let tail = proxy.node.process().map(|p| p.stderr_tail()).unwrap_or_default();
            for l in tail.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")) {
                eprintln!("proxy {i}: {l}");
            }
        }
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "client requests failed");
    assert!(done.load(Ordering::Relaxed) >= CLIENTS as u64, "the load ran");
    let leader = replicas.wait_leader(None).await.unwrap();
    poll(Duration::from_secs(15), "every target of the leader back at 0", async || {
        let rows = decode_rows(&replicas, leader).await?;
        let engine_idle = rows
            .iter()
            .all(|r| r.engine.as_ref().is_some_and(|e| e.running_requests + e.queued_requests == 0));
        (engine_idle && rows.iter().all(|r| r.held_requests == 0 && r.booked_input_tokens == 0)).then_some(())
    })
    .await
    .unwrap();
    let all = replicas.controls[leader].admin().await.list_targets(pb::ListTargetsRequest::default()).await;
    assert!(all.unwrap().into_inner().targets.iter().all(|r| r.held_requests == 0), "prefill targets at 0");
}

/// The health and time left ejected of replica `i`'s first target, if it answers.
async fn target_health(replicas: &Replicas, i: usize) -> Option<(String, u64)> {
    let channel =
        tonic::transport::Endpoint::from_shared(replicas.controls[i].url()).ok()?.connect().await.ok()?;
    let rows = pb::admin_client::AdminClient::new(channel)
        .list_targets(pb::ListTargetsRequest::default())
        .await
        .ok()?
        .into_inner()
        .targets;
    rows.first().map(|r| (r.health.clone(), r.ejected_for_ms))
}

/// An ejection outlives its leader: the leader writes what it ejected to etcd, and the replica
/// that takes over keeps the target out for the rest of its time instead of sending it picks
/// again until it has failed as often once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ejection_outlives_its_leader() {
    let etcd = tokio::task::spawn_blocking(EtcdServer::start).await.unwrap();
    let worker = sim(SimSpec::mixed("worker-0", MODEL, 1)).start().await.unwrap();
    let _registered = Registration::start(vec![etcd.url()], worker.record.clone(), Duration::from_secs(10));
    let flags = [
        "--decode-input-demand",
        "on",
        "--engine-poll-ms",
        "0",
        "--eject-after-failures",
        "2",
        "--eject-open-ms",
        "60000",
    ];
    let mut replicas = Replicas::start(&etcd.url(), 2, &flags, false).await.unwrap();
    let leader = replicas.wait_leader(None).await.unwrap();
    let proxy = ProxySpec::new(replicas.urls()).flag("--retries", 0).start().await.unwrap();
    proxy.wait_ready(MODEL).await.unwrap();
    let url = format!("{}/v1/chat/completions", proxy.url);
    // Two 500s in a row from the only worker: ejected on the leader.
    worker.faults(serde_json::json!({"fail_next": 2})).await;
    for _ in 0..2 {
        let (status, text) = post_json(&url, &chat(4, false), &[]).await;
        assert_eq!(status, http::StatusCode::BAD_GATEWAY, "{text}");
    }
    poll(Duration::from_secs(10), "the leader to eject the worker", async || {
        target_health(&replicas, leader).await.filter(|(h, _)| h == "ejected")
    })
    .await
    .unwrap();
    // Once the leader has written it to etcd (in the background), it dies; the other replica
    // takes over and keeps it out.
    let endpoints = etcd.root();
    poll(Duration::from_secs(10), "the ejection to be in etcd", async || {
        let persisted = infera_registry::config::load(&endpoints).await.ok()?;
        persisted.get("ejected_targets").filter(|v| v.starts_with("worker-0/0 ")).map(drop)
    })
    .await
    .unwrap();
    replicas.kill(leader);
    let next = replicas.wait_leader(Some(leader)).await.unwrap();
    let (state, left_ms) = poll(Duration::from_secs(10), "the new leader to list the worker", async || {
        target_health(&replicas, next).await
    })
    .await
    .unwrap();
    assert_eq!(state, "ejected", "the new leader carries the ejection on");
    assert!((30_000..=60_000).contains(&left_ms), "for the rest of its minute: {left_ms} ms");
    let metrics = replicas.controls[next].metrics().await.unwrap();
    assert!(!metrics.contains("infera_router_ejections_total{cause=\"server_error\"} 1"), "not ejected anew");
    drop(proxy);
    drop(replicas);
}

//! infera-control: the central demand ledger and scoring service.
//!
//! Module map, in the order a pick flows through it:
//!
//! - [`config`]: flags and env → validated [`Config`].
//! - [`service`]: gRPC edge (Router for proxies, Admin for operators, health, reflection);
//!   wire ⇄ domain at the edge, errors mapped once in [`error`].
//! - [`state`]: the shell — one lock around the core, clock, metrics, decision fan-out.
//! - [`routing`]: the pure routing core ([`routing::RoutingCore`]): a synchronous state machine,
//!   time and randomness passed in; one pick is a pipeline over
//!   [`view`] (targets per model and role) → [`ledger`] (loads) → [`scoring`] → book.
//!   [`target`] holds what they all share: a target's key and load.
//! - [`prefill_phase`]: how long prefill phases take (measured by the ledger) and how much a
//!   request still in prefill counts by its age.
//! - [`kv_feed`]: KV-event subscribers and the prefix index they fill.
//! - [`engine`]: each worker's own `/v1/loads` readings, beside the ledger (and the drift).
//! - [`fit`]: W fitted online from those readings' decode step times (`auto`).
//! - [`settings`]: W, the mode and the policies in force.
//! - [`auth`]: who may call the Router and as which [`identity`] (client certificates, proxy
//!   tokens); every lease and reservation belongs to the identity that opened it; [`bounds`]:
//!   what one identity may hold or send.
//! - [`ejection`]: outlier ejection — targets that fail their legs take no picks for a while.
//! - [`capacity`]: per-rank caps; a pick whose every candidate is full is refused.
//! - [`affinity`]: session → prefill target.
//! - [`persist`]: W and the mode persisted in etcd across restarts.
//! - [`drains`]: the drains the workers' registrars ask for before a stop, and the reports of
//!   what each still holds.
//! - [`decisions`]: decision events for `WatchDecisions`.
//! - [`leader`]: HA replicas — the election through etcd, the booking gate, the warm rebuild.
//! - [`workers_file`]: the static registry.
//! - [`engine_facts`]: every worker's `/server_info` (DP ranks, page size, model, role, transfer
//!   backend, KV cache dtype), checked against its record before it enters the view.
//! - [`pairing`]: which of a model's prefill and decode workers can exchange KV (PD pairing).
//! - [`metrics`]: Prometheus (logs and traces: `infera_runtime::telemetry`).
//! - [`tls`]: gRPC over TLS at run time, the TLS to the other replicas; [`reload`]: what SIGHUP
//!   reads again (the TLS files, the Router's tokens).

pub mod admission;
pub mod affinity;
pub mod auth;
pub mod bounds;
pub mod capacity;
pub mod classes;
pub mod config;
pub mod decisions;
pub mod drains;
pub mod ejection;
pub mod engine;
pub mod engine_facts;
pub mod error;
pub mod etcd_access;
pub mod fit;
pub mod identity;
pub mod kv_feed;
pub mod leader;
pub mod ledger;
pub mod metrics;
pub mod pairing;
pub mod persist;
pub mod prefill_phase;
pub mod reload;
pub mod routing;
pub mod scoring;
pub mod service;
pub mod settings;
pub mod state;
pub mod target;
pub mod tls;
pub mod view;
pub mod workers_file;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use infera_runtime::serve::Stop;
use rand::{SeedableRng, rngs::SmallRng};
use tokio::net::TcpListener;

pub use config::{Args, Config, ConfigError};

use crate::metrics::ControlMetrics;
use crate::routing::RoutingCore;
use crate::state::ControlState;
use crate::view::View;

/// How often overdue leases are looked for. Expiry happens at most this late.
const LEASE_CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// How often the KV feed's counters and the index's size reach the metrics.
const KV_METRICS_INTERVAL: Duration = Duration::from_secs(1);
/// How often the pools' fitted W reach the routing core and the fit's gauges. Fitted W moves
/// with the fit's half-life (a minute by default), so a quarter second late is nothing.
const WEIGHT_SYNC_INTERVAL: Duration = Duration::from_millis(250);
/// How often idle sessions are forgotten.
const SESSION_SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// How long a replica that has read the registry waits for its workers' engine facts before it
/// campaigns, and a static control before it opens leases (a worker that does not answer is
/// waited for no longer).
const DISCOVERY_WAIT: Duration = Duration::from_secs(5);
/// How long connecting to a worker's HTTP server may take (its `/server_info`, `/v1/loads`).
const WORKER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The sockets control serves on, bound by the caller (tests bind port 0 and keep them).
#[derive(Debug)]
pub struct Listeners {
    /// gRPC: Router, health and reflection; Admin too unless `admin` is given.
    pub grpc: TcpListener,
    /// gRPC: Admin, health and reflection, on a socket of their own (`--admin-listen`, bound
    /// by the caller when the configuration has one).
    pub admin: Option<TcpListener>,
    /// Prometheus `/metrics`.
    pub metrics: TcpListener,
}

/// Runs control until `shutdown` resolves.
pub async fn run(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let rng = match config.seed {
        Some(seed) => SmallRng::seed_from_u64(seed),
        None => SmallRng::from_os_rng(),
    };
    let etcd = config.etcd;
    let url = advertise_url(config.advertise_url, listeners.grpc.local_addr()?, config.tls.is_some());
    let admin_url = match &listeners.admin {
        Some(admin) => {
            Some(advertise_url(config.admin_advertise_url, admin.local_addr()?, config.tls.is_some()))
        }
        None => None,
    };
    // Standalone: ids of a random epoch. Replicas: the term of each election (none yet).
    let (leadership, epoch) = if etcd.is_none() {
        let epoch: u32 = rand::random();
        (leader::Leadership::standalone(url.clone(), epoch, std::time::Instant::now()), epoch)
    } else {
        (leader::Leadership::candidate(url.clone(), std::time::Instant::now()), 0)
    };
    let leadership = Arc::new(leadership.serving_admin_at(admin_url.clone()));
    let flags = persist::Persisted { settings: config.settings, weight_mode: config.weight_mode };
    // (Persisted ejections are the leader's: they are carried on at takeover, not here.)
    let (persist::Persisted { settings, weight_mode }, drains) = match &etcd {
        None => (flags.clone(), Vec::new()),
        Some(etcd) => {
            etcd_access::check(etcd).await?;
            let loaded = persist::load(etcd, flags.clone()).await;
            (loaded.persisted, loaded.drains)
        }
    };
    // The static workers are registered below, as registry changes are: the drains of their
    // targets apply when they appear.
    let mut view = View::default();
    view.drain_by_name(drains);
    let mut core = RoutingCore::new(view, settings, epoch, rng)?;
    core.weights_mut().set_mode(weight_mode);
    core.set_ejection(config.ejection);
    core.set_capacity(config.capacity);
    core.set_bounds(config.bounds);
    core.set_prefill_guard(config.admission.prefill_guard);
    let mut registry = prometheus_client::registry::Registry::default();
    let persist_to = etcd.clone();
    let kv = routing::KvIndex::new(config.kv_index_max_blocks);
    let (feed, kv_events) = kv_feed::KvFeed::new(kv, metrics::KvMetrics::register(&mut registry));
    let feed = Arc::new(feed);
    let fits = Arc::new(fit::WeightFits::new(config.fit_half_life));
    // The files were read and checked with the configuration.
    let worker_connector = infera_runtime::serve::worker_client::WorkerConnector::new(
        Some(WORKER_CONNECT_TIMEOUT),
        config.worker_tls.as_ref(),
    )?;
    let engine = (
        engine::EngineFeed::new(config.engine_poll, fits, worker_connector),
        engine::metrics::EngineMetrics::register(&mut registry),
        fit::metrics::FitMetrics::register(&mut registry),
    );
    let ha = state::Ha::new(
        leadership.clone(),
        etcd.clone(),
        flags,
        leader::metrics::LeaderMetrics::register(&mut registry),
    );
    let ejection = ejection::metrics::EjectionMetrics::register(&mut registry);
    let state = ControlState::new(
        core,
        feed.clone(),
        engine,
        ControlMetrics::register(&mut registry),
        persist_to,
        ha,
        ejection,
    );
    state.set_admission(config.admission.on, config.admission.classes.clone());
    // Into the view once each worker's `/server_info` has answered.
    for registered in config.workers {
        state.register(registered);
    }
    state.publish_loads();
    let stop = Stop::on(shutdown);
    let auth_metrics = auth::metrics::AuthMetrics::register(&mut registry, !config.router.is_open());
    if config.router.is_open() {
        tracing::warn!(
            listen = %config.listen,
            "THE ROUTER IS UNAUTHENTICATED: anyone who reaches it can open leases and release every \
             proxy's bookings. Give --router-tokens or --tls-client-ca (manual/operations/security.md)"
        );
    } else {
        tracing::info!(accepts = config.router.describe(), "Router calls need a credential");
    }
    let reloads = reload::Reloadable {
        tls: config.tls.as_ref().map(|tls| (tls.clone(), tls::TlsMetrics::register(&mut registry))),
        tokens: config.router.tokens.clone().map(|t| (t, auth_metrics.clone())),
        classes: config.admission.file.clone().map(|f| (f, state.clone())),
    };
    let peers = config.tls.as_ref().map(|tls| tls.peers.clone());
    reload::on_sighup(reloads)?;
    let admin_apart = listeners.admin.is_some();
    let plaintext_leaders = prometheus_client::metrics::counter::Counter::default();
    registry.sub_registry_with_prefix("infera_control").register(
        "plaintext_leaders_refused",
        "Admin calls a replica serving TLS did not forward, because the leader advertises a plain-text URL",
        plaintext_leaders.clone(),
    );
    let served = service::Serve {
        plaintext_leaders,
        admin_token: config.admin_token,
        router_auth: auth::RouterAuth::new(config.router.clone(), auth_metrics),
        redeclare_bytes: config.bounds.redeclare_bytes,
        peers,
        admin_apart,
        max_message_bytes: config.grpc_limits.max_message_bytes,
    };
    let routes = service::routes(state.clone(), served, stop.receiver()).await?;
    if let Some(etcd) = etcd {
        state.registry_pending();
        // A replica campaigns once it sees the registry: a leader without the view would refuse
        // picks it could serve.
        let synced = follow_registry(state.clone(), etcd.clone(), stop.receiver());
        tokio::spawn(drains::run(state.clone(), etcd.clone(), stop.receiver()));
        let election = leader::election::ElectionConfig { etcd, url, admin_url, ttl: config.leader_ttl };
        let (takeover, stop) = (state::takeover(&state), stop.receiver());
        let discovered = state.clone();
        tokio::spawn(async move {
            if synced.await.is_ok() {
                // And once it has read its workers' engines: a leader whose view still lacks a
                // PD model's prefill (its /server_info not read yet) would refuse every prefill
                // pick. Bounded: a worker that never answers does not keep a replica from leading.
                let deadline = tokio::time::Instant::now() + DISCOVERY_WAIT;
                while discovered.workers_awaiting_facts() > 0 && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // Only now is the target list handed out: a proxy routing on its fallback list
                // during a failover would otherwise take a list without the workers still being
                // asked, and refuse their legs ("no healthy decode target").
                discovered.registry_read();
                leader::election::run(election, leadership, takeover, stop).await;
            }
        });
    } else {
        // A static control leads from the start, but opens no lease before its workers' facts
        // are read: a proxy's first picks (or its waiting ones, re-sent after a restart) would
        // meet a view without them.
        state.wait_for_facts(std::time::Instant::now() + DISCOVERY_WAIT);
    }
    let stopped = || stop.wait();

    let feed = tokio::spawn(kv_feed::consume(feed, kv_events, stopped()));
    let reaper = tokio::spawn(reap(state.clone(), stopped()));
    tokio::spawn(state.clone().run_admissions(stopped()));
    let readiness: metrics::Readiness = {
        let state = state.clone();
        Arc::new(move || state.readiness())
    };
    let metrics = tokio::spawn(metrics::serve(listeners.metrics, Arc::new(registry), readiness, stopped()));
    let server_tls = config.tls.as_ref().map(|tls| tls.server.clone());
    let limits = config.grpc_limits;
    let grpc = serve_grpc(listeners.grpc, routes.grpc, server_tls.clone(), limits, stopped());
    match (listeners.admin, routes.admin) {
        (Some(listener), Some(admin)) => {
            tokio::try_join!(grpc, serve_grpc(listener, admin, server_tls, limits, stopped()))?;
        }
        _ => grpc.await?,
    }
    reaper.await?;
    feed.await?;
    metrics.await?;
    state.stop_engine();
    Ok(())
}

/// Serves `routes` on `listener` until `stop`, over TLS with `tls` (`--tls-cert`, the same on
/// every gRPC socket), each connection held to `limits` (`--grpc-*`): a cap on open
/// connections, a deadline to speak, HTTP/2 streams per connection, keep-alive pings that find
/// vanished peers.
async fn serve_grpc(
    listener: TcpListener,
    routes: tonic::service::Routes,
    tls: Option<Arc<infera_runtime::serve::tls::ServerTls>>,
    limits: config::GrpcLimits,
    stop: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    use infera_runtime::serve::{Listening, grpc};
    let conn = limits.conn;
    let server = tonic::transport::Server::builder()
        .max_concurrent_streams(conn.h2_max_concurrent_streams)
        .http2_keepalive_interval(Some(conn.h2_keep_alive))
        .http2_keepalive_timeout(Some(conn.h2_keep_alive))
        .http2_max_header_list_size(conn.max_header_bytes)
        .add_routes(routes);
    let listening = Listening::new(conn);
    match tls {
        Some(tls) => {
            server.serve_with_incoming_shutdown(grpc::incoming(listener, tls, listening), stop).await
        }
        None => server.serve_with_incoming_shutdown(grpc::plain(listener, listening), stop).await,
    }
}

/// Keeps the worker view in step with etcd: every change of `/infera/v1/workers/` is applied
/// to the view as it comes; an etcd outage keeps the last view. The answer comes once the first
/// snapshot is in the view.
fn follow_registry(
    state: Arc<ControlState>,
    etcd: infera_registry::EtcdConfig,
    stop: tokio::sync::watch::Receiver<()>,
) -> tokio::sync::oneshot::Receiver<()> {
    let (tx, mut changes) = tokio::sync::mpsc::channel(256);
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let (applied_tx, applied_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(infera_registry::watch_workers(etcd, tx, Some(synced_tx), stop));
    tokio::spawn(async move {
        // The watch says "synced" after sending the snapshot's changes; they are applied once
        // every change queued before that signal is.
        let mut synced = Some(synced_rx);
        let mut applied = Some(applied_tx);
        loop {
            tokio::select! {
                biased;
                change = changes.recv() => match change {
                    Some(change) => state.apply(change),
                    None => return,
                },
                Ok(()) = async { synced.as_mut().expect("polled while set").await }, if synced.is_some() => {
                    synced = None;
                    while let Ok(change) = changes.try_recv() {
                        state.apply(change);
                    }
                    if let Some(tx) = applied.take() {
                        let _ = tx.send(());
                    }
                }
            }
        }
    });
    applied_rx
}

/// The URL this control is reached at: `--advertise-url`, else its bound address (the host
/// name for an unspecified one), `https://` with TLS.
fn advertise_url(given: Option<String>, bound: std::net::SocketAddr, tls: bool) -> String {
    if let Some(url) = given {
        return url;
    }
    let scheme = if tls { "https" } else { "http" };
    if bound.ip().is_unspecified() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        if !host.is_empty() {
            return format!("{scheme}://{host}:{}", bound.port());
        }
    }
    format!("{scheme}://{bound}")
}

/// Releases what expired leases held, and forgets idle sessions, until stopped.
async fn reap(state: Arc<ControlState>, stop: impl Future<Output = ()>) {
    let mut leases = tokio::time::interval(LEASE_CHECK_INTERVAL);
    let mut sessions = tokio::time::interval(SESSION_SWEEP_INTERVAL);
    let mut kv_metrics = tokio::time::interval(KV_METRICS_INTERVAL);
    let mut weights = tokio::time::interval(WEIGHT_SYNC_INTERVAL);
    leases.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = leases.tick() => { state.tick(); }
            _ = sessions.tick() => state.sweep_sessions(),
            _ = kv_metrics.tick() => {
                state.export_kv_metrics();
                state.export_engine_metrics();
                state.export_leader_metrics();
                state.check_engines();
            }
            _ = weights.tick() => state.sync_weights(),
        }
    }
}

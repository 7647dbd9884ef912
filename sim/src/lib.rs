//! infera-sim: an emulated SGLang engine, a drop-in for `python -m sglang.launch_server` with
//! no GPU. It accepts SGLang's command line, serves SGLang's HTTP API and SSE shapes, performs
//! a PD rendezvous between a prefill and a decode sim, and paces tokens with a timing model
//! calibrated on the original study's measurements.
//!
//! Module map, in the order a request flows through it:
//!
//! - [`config`] (with [`argv`] and [`sglang_flags`], SGLang's own flag set): SGLang flags +
//!   `--sim-*` → validated [`SimConfig`]; [`disaggregation`] is the worker's PD role, which
//!   the layers below the command line read too.
//! - [`server`]: the hyper accept loop; [`api`] routes the SGLang API, [`bootstrap`] serves
//!   the prefill's bootstrap port.
//! - [`api::input`] parses bodies; [`flow`] runs one request: [`ranks`] picks the DP rank,
//!   [`faults`] may fail it, [`rooms`] (prefill) and [`pull`] (decode) do the PD rendezvous,
//!   the [`engine`] paces it; [`error`] maps failures to SGLang's error shapes.
//! - The pure core: [`scheduler`] (prefill queues per rank, lockstep decode steps) over
//!   [`timing`] (the formulas), [`params`] (their values), [`prefix_cache`] and [`tokens`];
//!   [`clock`] maps model time to wall time (`--sim-speedup`); [`kv_pool`] sizes each rank's KV
//!   pool as SGLang does, from [`model_config`] (the model directory's `config.json`) and the
//!   `[model]` / `[device]` parameters; [`stop`] ends a request at a stop string.
//! - [`kv_events`]: `--kv-events-config` — each rank publishes its prefix-cache changes as
//!   SGLang KV events over ZMQ.
//! - [`load_events`]: `--load-publish-endpoint` — each rank publishes its load as SGLang's
//!   `LoadStat` over ZMQ.
//! - [`app`] holds what handlers share; [`request_log`] records requests for tests.

pub mod api;
pub mod app;
pub mod argv;
pub mod bootstrap;
pub mod clock;
pub mod config;
pub mod disaggregation;
pub mod engine;
pub mod error;
pub mod faults;
pub mod flow;
pub mod kv_events;
pub mod kv_pool;
pub mod load_events;
pub mod model_config;
pub mod params;
pub mod prefix_cache;
pub mod pull;
pub mod ranks;
pub mod request_log;
pub mod rooms;
pub mod scheduler;
pub mod server;
pub mod sglang_flags;
pub mod stop;
pub mod timing;
pub mod tokens;

use infera_runtime::serve::tls::{Alpn, ServerTls};
use std::future::Future;
use std::sync::Arc;

use infera_runtime::serve::Stop;
use tokio::net::TcpListener;

pub use config::{ConfigError, SimArgs, SimConfig};
pub use disaggregation::DisaggregationMode;

use crate::app::App;

/// The sockets the sim serves on, bound by the caller (tests bind port 0 and keep them).
#[derive(Debug)]
pub struct Listeners {
    /// The SGLang HTTP API (`--host:--port`).
    pub http: TcpListener,
    /// The prefill's bootstrap port (`--disaggregation-bootstrap-port`); prefill role only.
    pub bootstrap: Option<TcpListener>,
}

/// Runs the sim until `shutdown` resolves: health turns 503, in-flight requests are aborted,
/// connections drain, and the engine stops.
pub async fn run(
    listeners: Listeners,
    mut config: SimConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.port = listeners.http.local_addr()?.port();
    if let Some(bootstrap) = &listeners.bootstrap {
        config.bootstrap_port = bootstrap.local_addr()?.port();
    } else if config.mode == DisaggregationMode::Prefill {
        tracing::warn!("prefill role without a bootstrap listener: no decode can pull its KV");
    }
    let kv = match &config.kv_events {
        Some(kv) => Some(kv_events::bind(kv, config.ranks, &config.sglang_version).await?),
        None => None,
    };
    let load = match (&config.load_events, &config.kv_events, &kv) {
        (Some(endpoint), Some(kv_config), Some(kv)) => {
            Some(load_events::bind(endpoint, kv_config, &kv.info, config.ranks).await?)
        }
        _ => None,
    };
    let mut app = App::with_kv_events(config, kv);
    app.load_port_base = load.as_ref().map(|l| l.port_base);
    let app = Arc::new(app);
    let stop = Stop::on(shutdown);
    let stopped = || stop.wait();

    let (driver_stop, driver_stopped) = tokio::sync::oneshot::channel::<()>();
    let driver = tokio::spawn(app.engine.clone().drive(async move {
        let _ = driver_stopped.await;
    }));
    let (load_stop, load_stopped) = tokio::sync::oneshot::channel::<()>();
    let load = load.map(|l| {
        let stop = async move {
            let _ = load_stopped.await;
        };
        let limits = load_events::Limits {
            capacity: api::info::reported_kv_capacity(&app.config),
            max_running_requests: app.config.max_running_requests,
        };
        tokio::spawn(load_events::publish(app.engine.clone(), limits, l.publishers, stop))
    });
    let bootstrap = listeners.bootstrap.map(|listener| {
        let app = app.clone();
        tokio::spawn(server::serve(listener, None, move |req| bootstrap::handle(app.clone(), req), stopped()))
    });
    let api_stop = {
        let (app, stopped) = (app.clone(), stopped());
        async move {
            stopped.await;
            app.stop_serving();
            let aborted = app.engine.abort_all();
            tracing::info!(aborted, "stopping");
        }
    };
    let api_app = app.clone();
    let tls = match app.config.ssl.clone() {
        Some(files) => Some(std::sync::Arc::new(ServerTls::load(files, Alpn::Http)?)),
        None => None,
    };
    server::serve(listeners.http, tls, move |req| api::handle(api_app.clone(), req), api_stop).await;
    if let Some(bootstrap) = bootstrap {
        bootstrap.await?;
    }
    let _ = driver_stop.send(());
    driver.await?;
    let _ = load_stop.send(());
    if let Some(load) = load {
        load.await?;
    }
    Ok(())
}

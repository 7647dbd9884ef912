//! infera-proxy: a stateless HTTP proxy serving the OpenAI and SGLang APIs in front of SGLang
//! workers, routed by infera-control.
//!
//! Module map, in request order:
//!
//! - [`config`]: flags and env → validated [`Config`].
//! - [`server`]: accept, route by path, one request's steps; [`any_worker`]: the requests any
//!   worker of a model answers (tokenize, model and server info, `/health_generate`), sent
//!   without a pick.
//! - [`facts`]: request id, model, input-token estimate, session, stream; [`lora`]: a LoRA
//!   adapter's name resolved to its base model; [`tokenizers`]: each model's tokenizer (from the
//!   flags, or found from its workers); [`tokens`]: the prompt's token ids and exact input tokens
//!   when its model has a tokenizer; [`parity`]: whether each worker renders chat prompts as the
//!   proxy does (else they route on load).
//! - [`route`] → [`control`]: `PickPrefill` + `PickDecode` at once (the picks asked together
//!   go out in one `PickMany`), with a local fallback from [`targets`] when control does not
//!   answer in time; the lease; releases (the `control` module's own doc says which file holds
//!   what).
//! - [`forward`]: the leg bodies (PD fields injected) and both legs sent concurrently;
//!   [`prefill`]: the prefill leg's own task and the handle that cancels it; [`upstream`]: the
//!   worker client, control and metrics they share, and `/abort_request`.
//! - [`request_legs`]: a request's legs as one value from dispatch to release, through the
//!   retries and the relay, each released exactly once.
//! - [`first_byte`]: what counts as an attempt's first byte, and whose failure it was before.
//! - [`relay`]: the decode answer streamed back; the end observed once (EOF, failure, cancel);
//!   [`prompt_logprobs`]: a `/generate` answer's prompt logprobs, from the prefill's into it.
//! - [`access`]: the request seen whole at its end — the access log line, tokens ([`usage`]) and
//!   durations per model and worker.
//! - [`error`]: errors → OpenAI JSON or an SSE error event; [`body`], [`metrics`].

pub mod access;
pub mod admission;
pub mod any_worker;
pub mod body;
pub mod bounds;
pub mod config;
pub mod control;
pub mod envelope;
pub mod error;
pub mod facts;
pub mod first_byte;
pub mod forward;
pub mod keys;
pub mod lora;
pub mod metrics;
pub mod parity;
pub mod prefill;
pub mod prompt_logprobs;
pub mod relay;
pub mod request_body;
pub mod request_legs;
pub mod retry;
pub mod route;
pub mod server;
pub mod targets;
pub mod tokenizers;
pub mod tokens;
pub mod upstream;
pub mod usage;

use std::future::Future;
use std::sync::Arc;

pub use config::{Args, Config, ConfigError};
use infera_runtime::serve::Stop;
pub use server::Listeners;

use crate::control::ControlLink;
use crate::metrics::ProxyMetrics;
use crate::server::Ctx;
use crate::upstream::Upstreams;

/// `infera-proxy@<bound address>`, the host name standing in for an unspecified address: a new
/// control leader waits for each proxy by this name, so two proxies must not share it.
fn default_name(bound: Option<std::net::SocketAddr>) -> String {
    let Some(addr) = bound else { return "infera-proxy@?".to_owned() };
    if addr.ip().is_unspecified() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        if !host.trim().is_empty() {
            return format!("infera-proxy@{}:{}", host.trim(), addr.port());
        }
    }
    format!("infera-proxy@{addr}")
}

/// What SIGHUP reads again.
#[derive(Debug)]
struct Reloadable {
    keys: Option<Arc<keys::Keys>>,
    control_token: Option<Arc<control::credential::ControlToken>>,
    tls: config::TlsConfig,
    link: Arc<ControlLink>,
    metrics: Arc<ProxyMetrics>,
}

impl Reloadable {
    /// The API keys, the listener's certificate and the files for control (its TLS, the token);
    /// a file that does not load is logged and counted, and what is in force stays.
    fn reload(&self) {
        if let Some(keys) = &self.keys {
            self.metrics.key_reload(keys.reload());
        }
        if let Some(token) = &self.control_token {
            let loaded = token.reload();
            if let Err(e) = &loaded {
                tracing::warn!(error = %e, "--control-token-file not reloaded: the token in force stays");
            }
            self.metrics.token_reload(loaded.is_ok());
        }
        if let Some(listener) = &self.tls.listener {
            let loaded = listener.reload();
            if let Err(e) = &loaded {
                tracing::warn!(error = %e, "--tls-cert/--tls-key not reloaded: the certificate in force stays");
            }
            self.metrics.tls_reload("listener", loaded.is_ok());
        }
        if let Some(control) = &self.tls.control {
            let loaded = control.files.tonic();
            match &loaded {
                Ok(tls) => self.link.set_control_tls(tls.clone()),
                Err(e) => {
                    tracing::warn!(error = %e, "control TLS files not reloaded: the ones in force stay")
                }
            }
            self.metrics.tls_reload("control", loaded.is_ok());
        }
    }

    /// Reads everything again on every SIGHUP.
    fn on_sighup(self) -> anyhow::Result<()> {
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                self.reload();
            }
        });
        Ok(())
    }
}

/// Runs the proxy on `listeners` until `shutdown` resolves; then stops accepting, lets open
/// requests finish, and closes its lease with control.
pub async fn run(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Listeners { api: listener, metrics: metrics_listener } = listeners;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(ProxyMetrics::register(&mut registry));
    let listening = infera_runtime::serve::Listening::new(config.connections.limits);
    let connections = metrics::ConnectionMetrics::register(&mut registry, listening.gate.clone());
    let name = config.name.clone().unwrap_or_else(|| default_name(listener.local_addr().ok()));
    let link = ControlLink::new(&config, name, metrics.clone());
    let stop = Stop::on(shutdown);
    link.spawn(stop.receiver());
    let up = Upstreams {
        client: upstream::worker_client(config.connect_timeout, config.worker_tls.as_ref())?,
        link: link.clone(),
        metrics,
    };
    if config.control_token.is_some() && config.tls.control.is_none() {
        tracing::warn!(
            "--control-token-file with an http:// control: the token crosses the network in clear \
             (give control --tls-cert and this proxy https:// URLs)"
        );
    }
    let reloadable = Reloadable {
        keys: config.api_keys.clone(),
        control_token: config.control_token.clone(),
        tls: config.tls.clone(),
        link: link.clone(),
        metrics: up.metrics.clone(),
    };
    reloadable.on_sighup()?;
    let admission = admission::Admission::new(config.admission);
    let body_budget = request_body::BodyBudget::new(config.max_body_bytes_in_flight);
    let parity = Arc::new(parity::Parity::register(&mut registry));
    tokenizers::discover::spawn(config.tokenizers.clone(), up.clone(), stop.receiver());
    if let Some(interval) = config.render_parity_interval {
        parity::spawn(parity.clone(), config.tokenizers.clone(), up.clone(), interval, stop.receiver());
    }
    let ctx = Arc::new(Ctx { up, registry, config, admission, connections, body_budget, parity });
    let metrics_server =
        metrics_listener.map(|l| tokio::spawn(server::serve_metrics(ctx.clone(), l, stop.wait())));
    server::serve(ctx, listener, listening, stop.wait()).await;
    if let Some(m) = metrics_server {
        let _ = m.await;
    }
    link.close().await;
    Ok(())
}

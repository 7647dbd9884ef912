//! `infera-proxy`: parse flags (exit 64 on bad ones), set up telemetry, bind, run until
//! SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use infera_proxy::tokenizers::Source;
use infera_proxy::{Args, Config};
use infera_runtime::telemetry::{self, Telemetry};
use infera_tokenize::EncoderKind;
use tokio::net::TcpListener;

fn main() -> ExitCode {
    telemetry::main::<Args, Config, _, _, _>("infera-proxy", serve)
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let telemetry = Telemetry::init(&config.telemetry)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind --listen {}", config.listen))?;
    let addr = listener.local_addr()?;
    let metrics = match config.connections.metrics_listen {
        Some(at) => {
            Some(TcpListener::bind(at).await.with_context(|| format!("cannot bind --metrics-listen {at}"))?)
        }
        None => None,
    };
    // One line on stdout that scripts and tests wait for (the ports may have been 0).
    let tls = if config.tls.listener.is_some() { " tls=on" } else { "" };
    let metrics_addr = metrics.as_ref().and_then(|m| m.local_addr().ok()).map(|a| format!(" metrics={a}"));
    println!("infera-proxy listening http={addr}{}{tls}", metrics_addr.unwrap_or_default());
    tracing::info!(%addr, control = ?config.control.iter().map(ToString::to_string).collect::<Vec<_>>(), "infera-proxy started");
    let open_files = telemetry::open_files::soft_limit();
    let cap = config.connections.limits.max_connections as u64;
    if open_files.is_some_and(|n| n < cap + 1_024) {
        tracing::warn!(
            open_files,
            max_connections = cap,
            "the open-files limit is below --max-connections plus room for the workers: raise the hard limit (LimitNOFILE=, the container runtime's nofile)"
        );
    } else {
        tracing::info!(open_files, "open-files limit");
    }
    for (model, loaded) in config.tokenizers.configured() {
        let model = model.map_or("(every model without its own)", |m| m.as_str());
        let source = match &loaded.source {
            Source::ModelFlag(path) => format!("--model-tokenizer {}", path.display()),
            Source::EveryModel(path) => format!("--tokenizer {}", path.display()),
            Source::Worker { worker, path } => format!("worker {worker}: {}", path.display()),
        };
        match loaded.tokenizer.encoder() {
            EncoderKind::Fast { offsets_from_bytes } => tracing::info!(
                model,
                %source,
                offsets_from_bytes,
                "tokenizer: encoding with kitoken (same ids as tokenizers on the probe)"
            ),
            EncoderKind::Reference(reason) => {
                tracing::warn!(model, %source, %reason, "tokenizer: encoding with tokenizers");
            }
        }
    }
    if !config.tokenizers.configured().any(|(model, _)| model.is_none()) {
        tracing::info!(
            "tokenizer: a model without --model-tokenizer gets the one its workers' /model_info names, when that path is on this host"
        );
    }
    let listeners = infera_proxy::Listeners { api: listener, metrics };
    let result = infera_proxy::run(listeners, config, telemetry::stop_signal()).await;
    telemetry.shutdown().await;
    result
}

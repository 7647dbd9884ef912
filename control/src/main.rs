//! `infera-control`: parse flags (exit 64 on bad ones), set up telemetry, bind, run until
//! SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use infera_control::{Args, Config, Listeners};
use infera_proto::telemetry::{self, Telemetry};
use tokio::net::TcpListener;

fn main() -> ExitCode {
    telemetry::main::<Args, Config, _, _, _>("infera-control", serve)
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let telemetry = Telemetry::init(&config.telemetry)?;
    let grpc = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind the gRPC address --listen {}", config.listen))?;
    let metrics = TcpListener::bind(config.metrics_listen).await.with_context(|| {
        format!("cannot bind the metrics address --metrics-listen {}", config.metrics_listen)
    })?;
    if config.has_no_workers() {
        tracing::warn!("the workers file lists no workers: every pick will fail with NOT_FOUND");
    }
    // One line on stdout that scripts and tests wait for (ports may have been 0).
    let tls = if config.tls.is_some() { " tls=on" } else { "" };
    println!("infera-control listening grpc={} metrics={}{tls}", grpc.local_addr()?, metrics.local_addr()?);
    tracing::info!(
        grpc = %grpc.local_addr()?,
        metrics = %metrics.local_addr()?,
        workers = config.workers.len(),
        mode = %config.settings.mode,
        weight = config.settings.weight.get(),
        policy = %config.settings.policy,
        "infera-control started"
    );
    let result = infera_control::run(Listeners { grpc, metrics }, config, telemetry::stop_signal()).await;
    telemetry.shutdown().await;
    result
}

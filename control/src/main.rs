//! `infera-control`: parse flags (exit 64 on bad ones), set up telemetry, bind, run until
//! SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use infera_control::{Args, Config, Listeners};
use infera_runtime::telemetry::{self, Telemetry};
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
    let admin = match config.admin_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot bind the Admin address --admin-listen {addr}"))?,
        ),
        None => None,
    };
    tracing::info!(open_files = telemetry::open_files::soft_limit(), "open-files limit");
    if config.has_no_workers() {
        tracing::warn!("the workers file lists no workers: every pick will fail with NOT_FOUND");
    }
    // One line on stdout that scripts and tests wait for (ports may have been 0).
    let tls = if config.tls.is_some() { " tls=on" } else { "" };
    let admin_addr = admin.as_ref().map(TcpListener::local_addr).transpose()?;
    let admin_field = admin_addr.map(|a| format!(" admin={a}")).unwrap_or_default();
    println!(
        "infera-control listening grpc={} metrics={}{admin_field}{tls}",
        grpc.local_addr()?,
        metrics.local_addr()?
    );
    tracing::info!(
        grpc = %grpc.local_addr()?,
        metrics = %metrics.local_addr()?,
        admin = ?admin_addr,
        workers = config.workers.len(),
        mode = %config.settings.mode,
        weight = config.settings.weight.get(),
        policy = %config.settings.policy,
        "infera-control started"
    );
    let result =
        infera_control::run(Listeners { grpc, admin, metrics }, config, telemetry::stop_signal()).await;
    telemetry.shutdown().await;
    result
}

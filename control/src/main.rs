//! `infera-control`: parse flags, set up telemetry, bind, run until SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use infera_control::{Args, Config, Listeners};
use infera_proto::telemetry::Telemetry;
use tokio::net::TcpListener;

/// `EX_USAGE`: the configuration cannot start.
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_USAGE) } else { ExitCode::SUCCESS };
        }
    };
    let config = match Config::try_from(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("infera-control: error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("infera-control: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("infera-control: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let telemetry = Telemetry::init(&config.telemetry)?;
    let grpc = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind the gRPC address --listen {}", config.listen))?;
    let metrics = TcpListener::bind(config.metrics_listen).await.with_context(|| {
        format!("cannot bind the metrics address --metrics-listen {}", config.metrics_listen)
    })?;
    if config.workers.is_empty() {
        tracing::warn!("the workers file lists no workers: every pick will fail with NOT_FOUND");
    }
    // One line on stdout that scripts and tests wait for (ports may have been 0).
    println!("infera-control listening grpc={} metrics={}", grpc.local_addr()?, metrics.local_addr()?);
    tracing::info!(
        grpc = %grpc.local_addr()?,
        metrics = %metrics.local_addr()?,
        workers = config.workers.len(),
        mode = %config.settings.mode,
        weight = config.settings.weight.get(),
        policy = %config.settings.policy,
        "infera-control started"
    );
    let result = infera_control::run(Listeners { grpc, metrics }, config, stop_signal()).await;
    telemetry.shutdown().await;
    result
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("stopping");
}

//! `infera-proxy`: parse flags, set up telemetry, bind, run until SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use infera_proto::telemetry::Telemetry;
use infera_proxy::{Args, Config};
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
            eprintln!("infera-proxy: error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("infera-proxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("infera-proxy: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let telemetry = Telemetry::init(&config.telemetry)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind --listen {}", config.listen))?;
    let addr = listener.local_addr()?;
    println!("infera-proxy listening http={addr}");
    tracing::info!(%addr, control = %config.control, "infera-proxy started");
    let result = infera_proxy::run(listener, config, stop_signal()).await;
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

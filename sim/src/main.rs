//! `infera-sim`: parse the SGLang command line, bind, print the listening line, run until
//! SIGINT/SIGTERM. Exit 64 on bad configuration, 1 when start-up fails.

use std::process::ExitCode;

use anyhow::Context;
use infera_sim::{DisaggregationMode, Listeners, SimArgs, SimConfig};
use tokio::net::TcpListener;

/// `EX_USAGE`: the configuration cannot start.
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let args = match SimArgs::parse_lenient(std::env::args_os()) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_USAGE) } else { ExitCode::SUCCESS };
        }
    };
    let config = match SimConfig::try_from(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("infera-sim: error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let filter = tracing_subscriber::EnvFilter::new(&config.log);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("infera-sim: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("infera-sim: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: SimConfig) -> anyhow::Result<()> {
    let http = TcpListener::bind((config.host.as_str(), config.port))
        .await
        .with_context(|| format!("cannot bind --host {} --port {}", config.host, config.port))?;
    let bootstrap = match config.mode {
        DisaggregationMode::Prefill => {
            Some(TcpListener::bind((config.host.as_str(), config.bootstrap_port)).await.with_context(
                || format!("cannot bind --disaggregation-bootstrap-port {}", config.bootstrap_port),
            )?)
        }
        _ => None,
    };
    let bootstrap_addr = match &bootstrap {
        Some(l) => l.local_addr()?.to_string(),
        None => "-".to_owned(),
    };
    // One line on stdout that scripts and tests wait for (ports may have been 0).
    println!("infera-sim listening http={} bootstrap={bootstrap_addr}", http.local_addr()?);
    tracing::info!(
        http = %http.local_addr()?,
        bootstrap = %bootstrap_addr,
        mode = config.mode.as_str(),
        ranks = config.ranks,
        speedup = config.speedup,
        "infera-sim started"
    );
    infera_sim::run(Listeners { http, bootstrap }, config, stop_signal()).await
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

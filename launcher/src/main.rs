//! `infera-launch`: parse flags, load and check the deployment file (exit 64 on a bad one),
//! run the task (`plan` prints; `up` runs the deployment until SIGTERM/SIGINT).

use std::process::ExitCode;

use infera_launcher::{Args, Command, Config};
use infera_runtime::telemetry::{self, Telemetry};

fn main() -> ExitCode {
    telemetry::main::<Args, Config, _, _, _>("infera-launch", run)
}

async fn run(config: Config) -> anyhow::Result<()> {
    match config.command {
        Command::Plan(plan) => print!("{}", plan.render()),
        Command::Up(up) => {
            // Logs first: the registrar and the drain report through `tracing`.
            let telemetry = Telemetry::init(&up.telemetry)?;
            let ran = infera_launcher::up::run(*up).await;
            telemetry.shutdown().await;
            ran?;
        }
    }
    Ok(())
}

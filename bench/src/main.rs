//! `infera-bench`: benchmarks that print ratios against a baseline measured in the same run.
//!
//! - `control`: PickDecode+Release round trips against a plain tonic echo service, and the
//!   in-process pick+book cost as the number of targets grows.

mod control;
mod echo;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "infera-bench", version, about)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Control: gRPC round trips vs a tonic echo baseline, and in-process pick cost.
    Control(control::ControlArgs),
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Cmd::Control(args) => control::run(args),
    }
}

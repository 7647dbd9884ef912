//! `infera-bench`: benchmarks that print ratios against a baseline measured in the same run.
//!
//! - `control`: PickDecode+Release round trips against a plain tonic echo service, and the
//!   in-process pick+book cost as the number of targets grows.
//! - `kv-index`: the KV prefix index's ingest rate and overlap-query latency on events made from a
//!   Mooncake trace, and what a KV-aware prefill pick costs over a plain one.
//! - `proxy`: client → proxy → sim against client → sim in the same run; proxy memory per
//!   in-flight stream.
//! - `replay`: a Mooncake or agentic trace against an OpenAI-compatible URL; tok/s, TTFT, ITL.

mod control;
mod echo;
mod kv_index;
mod proxy;
mod replay;

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
    /// KV index: ingest and overlap queries on events from a Mooncake trace; KV-aware pick cost.
    KvIndex(kv_index::Args),
    /// Proxy: added TTFT and throughput against going to the worker directly; memory per stream.
    Proxy(proxy::ProxyArgs),
    /// Replay: a request trace against an OpenAI-compatible base URL (open or closed loop).
    Replay(replay::ReplayArgs),
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Cmd::Control(args) => control::run(args),
        Cmd::KvIndex(args) => kv_index::run(args),
        Cmd::Proxy(args) => proxy::run(args),
        Cmd::Replay(args) => replay::run(args),
    }
}

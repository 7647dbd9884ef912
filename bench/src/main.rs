//! `infera-bench`: benchmarks that print ratios against a baseline measured in the same run.
//!
//! - `attack`: the attack suite with floods ten times the test's, against a fresh hardened
//!   deployment per run: per case what was sent, what came back, and the peak RSS of control and
//!   each proxy against their peak under ordinary requests.
//! - `bpe-compare`: the proxy's BPE encoder (Hugging Face `tokenizers`) against `kitoken` on the
//!   fixture and real `tokenizer.json` files: identical ids or not, and MB/s of each.
//! - `chaos`: streamed and whole requests through two proxies while sim faults, client cancels,
//!   a proxy and a control SIGKILL and an etcd outage hit them on a seeded schedule: how every
//!   request ended (none may hang), the errors clients saw, the ledger and the engines at the end.
//! - `control`: PickDecode+Release round trips against a plain tonic echo service, and the
//!   in-process pick+book cost as the number of targets grows.
//! - `failover`: SIGKILLs of the leader of HA control replicas under streaming load — time to
//!   the first booked pick and to a warm ledger, client failures — and the leader's pick RPC
//!   latency against a standalone control.
//! - `kv-index`: the KV prefix index's ingest rate and overlap-query latency on events made from a
//!   Mooncake trace, and what a KV-aware prefill pick costs over a plain one.
//! - `kv-study`: cache-aware prefill routing end to end on a Mooncake trace, against load-only and
//!   round-robin prefill picks, with the trace's infinite-cache hit-ratio bound.
//! - `proxy`: client → proxy → sim against client → sim in the same run; proxy memory per
//!   in-flight stream.
//! - `replay`: a Mooncake or agentic trace against an OpenAI-compatible URL; tok/s, TTFT, ITL.
//! - `sglang-soak`: mixed PD and aggregated requests through two proxies to real SGLang servers
//!   on CPU, with clients that hang up: errors, what is left booked, and infera's added latency
//!   over the same requests sent straight to the workers.
//! - `study decode-weight`: the original study's decode request-weight study on fresh emulated 1P1D
//!   deployments, one per arm.
//! - `tenants`: two tenants, one flooding, through several proxies under control's fleet
//!   admission, a cap per proxy, and none: each tenant's token share against its weight's,
//!   Jain's index, and the decode's predicted and measured step against the ITL target.
//! - `tokenize`: the proxy's tokenizer (render + encode + page hashes) per request, whole and
//!   with the session cache, against parsing the request's JSON.

mod attack;
mod binaries;
mod bpe_compare;
mod chaos;
mod control;
mod echo;
mod failover;
mod kv_index;
mod kv_study;
mod proxy;
mod replay;
mod sglang_soak;
mod study;
mod tenants;
mod tokenize;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "infera-bench", version, about)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Attack: the attack suite with larger floods; per case sent, answered, safe, peak RSS.
    Attack(attack::AttackArgs),
    /// BPE: the proxy's encoder vs kitoken on the same tokenizer.json files (ids, MB/s).
    BpeCompare(bpe_compare::Args),
    /// Chaos: faults, cancels, proxy/control kills and an etcd outage under load; hung, errors, ledger.
    Chaos(chaos::ChaosArgs),
    /// Control: gRPC round trips vs a tonic echo baseline, and in-process pick cost.
    Control(control::ControlArgs),
    /// Failover: leader kills under load (time to book again, to be warm); leader vs standalone pick latency.
    Failover(failover::FailoverArgs),
    /// KV index: ingest and overlap queries on events from a Mooncake trace; KV-aware pick cost.
    KvIndex(kv_index::Args),
    /// KV study: cache-aware prefill routing vs load and round-robin on a Mooncake trace, end to end.
    KvStudy(kv_study::Args),
    /// Proxy: added TTFT and throughput against going to the worker directly; memory per stream.
    Proxy(proxy::ProxyArgs),
    /// Replay: a request trace against an OpenAI-compatible base URL (open or closed loop).
    Replay(replay::ReplayArgs),
    /// SGLang soak: PD + aggregated through two proxies to real SGLang on CPU; errors, ledger, added latency.
    SglangSoak(sglang_soak::SoakArgs),
    /// Study: the decode request weight W vs token-only demand and the legacy policies.
    Study(study::StudyArgs),
    /// Tenants: fleet admission vs per-proxy caps vs none under a flooding tenant; shares, Jain, step vs ITL target.
    Tenants(tenants::TenantsArgs),
    /// Tokenize: render + encode + page hashes per request, whole vs session-cached, vs JSON parsing.
    Tokenize(tokenize::TokenizeArgs),
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Cmd::Attack(args) => attack::run(args),
        Cmd::BpeCompare(args) => bpe_compare::run(args),
        Cmd::Chaos(args) => chaos::run(args),
        Cmd::Control(args) => control::run(args),
        Cmd::Failover(args) => failover::run(args),
        Cmd::KvIndex(args) => kv_index::run(args),
        Cmd::KvStudy(args) => kv_study::run(args),
        Cmd::Proxy(args) => proxy::run(args),
        Cmd::Replay(args) => replay::run(args),
        Cmd::SglangSoak(args) => sglang_soak::run(args),
        Cmd::Study(args) => study::run(args),
        Cmd::Tenants(args) => tenants::run(args),
        Cmd::Tokenize(args) => tokenize::run(args),
    }
}

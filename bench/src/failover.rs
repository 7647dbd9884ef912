//! Failover benchmark: how long the control plane takes to book again, and to hold what the
//! proxies hold again, after its leader is SIGKILLed under load — and what the replica set costs
//! a pick against a standalone control, measured in the same run.
//!
//! One run ([`deploy`]): a real etcd, a 1P1D pair of sims registered in it, `--replicas`
//! `infera-control` processes (`--decode-input-demand on`) electing a leader, `--proxies` proxies
//! naming every replica, and a standalone control over the same sims. A closed loop of
//! `--streams` streaming chat completions runs through the proxies ([`load`]) while the leader is
//! killed `--failovers` times, each at a seeded random moment; every takeover is watched
//! ([`takeover`]) and the killed replica restarted and awaited as a follower before the next.
//! Then, the load stopped, the pick RPC latency of the leader is compared with the standalone
//! control's ([`pick_latency`]).

mod deploy;
mod load;
mod pick_latency;
mod takeover;

use std::time::Duration;

use anyhow::Context as _;
use rand::{Rng, SeedableRng, rngs::SmallRng};

use crate::replay::percentile::percentile;
use takeover::{Failover, Probe};

#[derive(clap::Args, Debug)]
pub(crate) struct FailoverArgs {
    /// Leader kills.
    #[arg(long, env = "INFERA_BENCH_FAILOVERS", default_value_t = 10)]
    failovers: usize,
    /// Control replicas.
    #[arg(long, env = "INFERA_BENCH_REPLICAS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..=9))]
    replicas: u64,
    /// Proxies (each names every replica in `--control`).
    #[arg(long, env = "INFERA_BENCH_PROXIES", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=8))]
    proxies: u64,
    /// Closed-loop streams through the proxies (each re-issued when it ends).
    #[arg(long, env = "INFERA_BENCH_STREAMS", default_value_t = 16)]
    streams: usize,
    /// Fewest tokens a request asks for.
    #[arg(long, env = "INFERA_BENCH_MIN_TOKENS", default_value_t = 128)]
    min_tokens: u32,
    /// Most tokens a request asks for (each draws its length uniformly between the two).
    #[arg(long, env = "INFERA_BENCH_MAX_TOKENS", default_value_t = 4_096)]
    max_tokens: u32,
    /// The decode sim's attention-DP ranks.
    #[arg(long, env = "INFERA_BENCH_DECODE_RANKS", default_value_t = 4)]
    decode_ranks: u32,
    /// The sims' time compression.
    #[arg(long, env = "INFERA_BENCH_SIM_SPEEDUP", default_value_t = 10.0)]
    sim_speedup: f64,
    /// Every control's `--leader-lease-ttl-secs`.
    #[arg(long, env = "INFERA_BENCH_LEADER_LEASE_TTL_SECS", default_value_t = 2)]
    leader_lease_ttl_secs: u64,
    /// Every proxy's `--pick-timeout-ms` (the proxy's default).
    #[arg(long, env = "INFERA_BENCH_PICK_TIMEOUT_MS", default_value_t = 50)]
    pick_timeout_ms: u64,
    /// Shortest wait before a kill, once the previous failover is over (ms).
    #[arg(long, env = "INFERA_BENCH_GAP_MIN_MS", default_value_t = 500)]
    gap_min_ms: u64,
    /// Longest wait before a kill (ms); each wait is drawn uniformly between the two.
    #[arg(long, env = "INFERA_BENCH_GAP_MAX_MS", default_value_t = 2_500)]
    gap_max_ms: u64,
    /// Timed picks per side of the pick latency.
    #[arg(long, env = "INFERA_BENCH_PICKS", default_value_t = 5_000)]
    picks: usize,
    /// Untimed picks per side first.
    #[arg(long, env = "INFERA_BENCH_WARMUP_PICKS", default_value_t = 500)]
    warmup_picks: usize,
    /// Alternating rounds per side of the pick latency.
    #[arg(long, env = "INFERA_BENCH_ROUNDS", default_value_t = 5)]
    rounds: usize,
    /// Seed of the kill moments and the sims.
    #[arg(long, env = "INFERA_BENCH_SEED", default_value_t = 1)]
    seed: u64,
}

pub(crate) fn run(args: FailoverArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.gap_min_ms <= args.gap_max_ms, "--gap-min-ms is above --gap-max-ms");
    anyhow::ensure!(args.streams > 0, "--streams must be at least 1");
    anyhow::ensure!(args.min_tokens <= args.max_tokens, "--min-tokens is above --max-tokens");
    crate::binaries::release_binaries("failover", &["infera-control"])?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(bench(args))
}

async fn bench(args: FailoverArgs) -> anyhow::Result<()> {
    let spec = deploy::Spec {
        replicas: args.replicas as usize,
        proxies: args.proxies as usize,
        decode_ranks: args.decode_ranks,
        speedup: args.sim_speedup,
        leader_lease_ttl_secs: args.leader_lease_ttl_secs,
        pick_timeout_ms: args.pick_timeout_ms,
        seed: args.seed,
    };
    let mut d = deploy::Deployment::start(&spec).await?;
    let probe = Probe::new(&d.replicas, d.proxy_urls())?;
    println!(
        "failover: {} control replicas on etcd (--leader-lease-ttl-secs {}), 1P1D sims (decode {} DP ranks, speed-up {}), \
         {} proxies (--pick-timeout-ms {}), {} closed-loop streams of {}–{} tokens; {} kills of the leader (SIGKILL), seed {}",
        args.replicas,
        args.leader_lease_ttl_secs,
        args.decode_ranks,
        args.sim_speedup,
        args.proxies,
        args.pick_timeout_ms,
        args.streams,
        args.min_tokens,
        args.max_tokens,
        args.failovers,
        args.seed
    );
    let load =
        load::Load::start(&d.proxy_urls(), args.streams, (args.min_tokens, args.max_tokens), args.seed);
    let mut leader = probe.leader().await?;
    probe.wait_warm(leader).await?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    println!(
        "  {:>2} {:>12} {:>10} {:>13} {:>8} {:>13} {:>22} {:>11} {:>11}",
        "#",
        "killed → new",
        "elected ms",
        "first pick ms",
        "warm ms",
        "ledger=sim ms",
        "re-declared legs b+l",
        "local picks",
        "rejoined ms"
    );
    let mut runs: Vec<Failover> = Vec::new();
    let mut matched_before = 0;
    for n in 1..=args.failovers {
        let gap = rng.random_range(args.gap_min_ms..=args.gap_max_ms);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        matched_before += usize::from(probe.matches_now(leader, &d.decode).await);
        let f = probe
            .failover(&mut d.replicas, leader, &d.decode)
            .await
            .with_context(|| format!("failover {n}"))?;
        println!(
            "  {:>2} {:>12} {:>10.0} {:>13.0} {:>8.0} {:>13} {:>22} {:>11.0} {:>11.0}",
            n,
            format!("{} → {}", f.killed, f.leader),
            ms(f.elected),
            ms(f.first_pick),
            ms(f.warm),
            f.matched.map_or("—".to_owned(), |m| format!("{:.0}", ms(m))),
            format!("{:.0} + {:.0}", f.redeclared.0, f.redeclared.1),
            f.local_picks,
            ms(f.rejoined)
        );
        leader = f.leader;
        runs.push(f);
    }
    let outcome = load.stop().await?;
    let fallbacks = probe.local_picks().await;

    let pick_plan = pick_latency::Plan { warmup: args.warmup_picks, picks: args.picks, rounds: args.rounds };
    let leader_url = d.replicas.controls[leader].url();
    let (one, set) = pick_latency::compare(&d.standalone.url(), &leader_url, pick_plan).await?;

    report(&args, &runs, matched_before, &outcome, fallbacks, one, set);
    d.stop().await
}

/// One figure of a failover (`None`: not measured).
type Measure = fn(&Failover) -> Option<Duration>;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(
    args: &FailoverArgs,
    runs: &[Failover],
    matched_before: usize,
    outcome: &load::Outcome,
    fallbacks: f64,
    one: pick_latency::Latency,
    set: pick_latency::Latency,
) {
    let stat = |f: Measure| {
        let v: Vec<f64> = runs.iter().filter_map(|r| f(r).map(ms)).collect();
        let p50 = percentile(&v, 50.0).unwrap_or(f64::NAN);
        let max = v.iter().copied().fold(f64::NAN, f64::max);
        (p50, max, v.len())
    };
    let n = runs.len();
    println!();
    println!("  {:<38} {:>9} {:>9} {:>9}", "from the kill of the leader", "p50 ms", "max ms", "of");
    let rows: [(&str, Measure); 5] = [
        ("new leader elected", |r| Some(r.elected)),
        ("first pick booked by the new leader", |r| Some(r.first_pick)),
        ("new leader warm", |r| Some(r.warm)),
        ("  of which after its election", |r| Some(r.warm.saturating_sub(r.elected))),
        ("its decode ledger = the decode sim", |r| r.matched),
    ];
    for (name, f) in rows {
        let (p50, max, k) = stat(f);
        println!("  {name:<38} {p50:>9.0} {max:>9.0} {:>9}", format!("{k}/{n}"));
    }
    println!(
        "  the old leader's decode ledger = the decode sim just before the kill: {matched_before}/{n} (one poll each)"
    );
    let rate = (outcome.ok + outcome.failed) as f64 / outcome.secs;
    println!(
        "  requests arrived at {rate:.1}/s (one per {:.0} ms): a first pick waits for the next after a proxy has moved",
        1e3 / rate
    );
    println!(
        "  re-declared legs b+l: legs in flight re-declared to the new leader, booked by the old one + picked by a proxy meanwhile"
    );
    let during: f64 = runs.iter().map(|r| r.local_picks).sum();
    println!(
        "  client requests: {} completed, {} failed; picks the proxies made without control: {fallbacks:.0} \
         ({during:.0} during the failovers, {:.0} outside them)",
        outcome.ok,
        outcome.failed,
        fallbacks - during
    );
    for e in &outcome.errors {
        println!("    failed: {e}");
    }
    let (_, warm_max, _) = stat(|r| Some(r.warm));
    println!(
        "  goal warm within 3 s (--leader-lease-ttl-secs {}): {} (max {:.0} ms); goal no client failures: {}",
        args.leader_lease_ttl_secs,
        verdict(warm_max <= 3_000.0),
        warm_max,
        verdict(outcome.failed == 0)
    );

    println!();
    println!(
        "pick RPC latency: PickDecode (then Release, untimed), one client per side, sequential, {} alternating rounds, \
         {} timed picks per side after {} warm-up, load stopped",
        args.rounds, args.picks, args.warmup_picks
    );
    println!("  {:<36} {:>9} {:>9}", "", "p50 µs", "p99 µs");
    println!("  {:<36} {:>9.1} {:>9.1}", "1 control, standalone (no etcd)", one.p50_us, one.p99_us);
    println!(
        "  {:<36} {:>9.1} {:>9.1}",
        format!("leader of {} replicas", args.replicas),
        set.p50_us,
        set.p99_us
    );
    let (r50, r99) = (set.p50_us / one.p50_us, set.p99_us / one.p99_us);
    println!("  {:<36} {:>9.2} {:>9.2}", format!("ratio {} replicas / 1", args.replicas), r50, r99);
    println!("  goal no added pick latency on the leader (p50 ratio ≤ 1.10): {}", verdict(r50 <= 1.10));
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

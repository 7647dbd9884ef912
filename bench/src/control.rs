//! Control benchmarks.
//!
//! 1. gRPC round trips: `clients` concurrent clients, each on its own connection, loop
//!    PickDecode + Release against an in-process control for a round; the baseline is a plain
//!    tonic echo service called twice per round trip (same number of RPCs) by the same number
//!    of clients. Rounds alternate baseline and control so drift on a shared machine hits both;
//!    the report gives medians and their ratio.
//! 2. The KV-aware round ([`kv`]): PickPrefill with 2,000 page hashes + PickDecode + two
//!    Releases against control whose prefix index was filled over ZMQ, against the echo called
//!    as often.
//! 3. The batched round ([`batch`]): 16 decode picks as one PickMany + one ReleaseMany against
//!    the same 16 as PickDecode + Release each, in picks per second.
//! 4. In-process pick + book on the pure core, for growing target counts, with the ledger kept
//!    warm (`WARM_PER_TARGET` reservations per target); each pick is released again outside
//!    the timed section so the load stays steady.

use std::time::{Duration, Instant, SystemTime};

use clap::Parser as _;
use infera_control::routing::{PickContext, RoutingCore};
use infera_control::settings::Settings;
use infera_control::view::View;
use infera_control::{Args as ControlFlags, Config, Listeners};
use infera_proto::pb::{self, admin_client::AdminClient, router_client::RouterClient};
use infera_proto::types::{
    DecodeInputDemand, DecodePolicy, LeaseId, ModelName, PickKind, PickRequest, Release, ReleaseReason,
    RequestId, RequestWeight, WorkerRecord,
};
use infera_testkit::EngineStubs;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use tokio::net::TcpListener;
use tonic::transport::Channel;

use crate::echo::{self, pb::EchoMessage, pb::echo_client::EchoClient};

mod batch;
mod kv;

const WARM_PER_TARGET: usize = 4;
const DECODE_RANKS: u32 = 8;

#[derive(clap::Args, Debug)]
pub(crate) struct ControlArgs {
    /// Concurrent gRPC clients, each on its own connection.
    #[arg(long, env = "INFERA_BENCH_CLIENTS", default_value_t = 4)]
    clients: usize,
    /// Measured rounds per side (they alternate: baseline, control, baseline, …).
    #[arg(long, env = "INFERA_BENCH_ROUNDS", default_value_t = 5)]
    rounds: usize,
    /// Milliseconds per round.
    #[arg(long, env = "INFERA_BENCH_ROUND_MS", default_value_t = 1_000)]
    round_ms: u64,
    /// Target counts for the in-process pick cost.
    #[arg(long, env = "INFERA_BENCH_TARGETS", value_delimiter = ',', default_value = "8,64,512,4096")]
    targets: Vec<u32>,
    /// Timed picks per target count.
    #[arg(long, env = "INFERA_BENCH_PICKS", default_value_t = 20_000)]
    picks: usize,
    /// Seed for token counts and tie-breaks.
    #[arg(long, env = "INFERA_BENCH_SEED", default_value_t = 1)]
    seed: u64,
}

pub(crate) fn run(args: ControlArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let Plain { echo: echo_rate, control: control_rate, batched } = rt.block_on(round_trips(&args))?;
    let kv = rt.block_on(kv::round_trips(&args))?;
    drop(rt);
    println!(
        "control gRPC round trips: {} clients on loopback, {} alternating rounds of {} ms per side",
        args.clients, args.rounds, args.round_ms
    );
    println!("  baseline  tonic unary echo ×2      {:>9.0} round trips/s (median)", echo_rate);
    println!("  control   PickDecode + Release     {:>9.0} round trips/s (median)", control_rate);
    let ratio = control_rate / echo_rate;
    println!("  ratio control / echo: {ratio:.2}  (goal ≥ 0.80: {})", verdict(ratio >= 0.8));
    println!(
        "control KV-aware round trips: 8 prefills whose index was filled over ZMQ (~650 k blocks), PickPrefill {} bytes",
        kv.prefill_bytes
    );
    let (kv_echo, kv_rate) = (median(kv.echo.clone()), median(kv.control.clone()));
    println!(
        "  baseline  tonic unary echo ×4 (first payload as large)  {kv_echo:>9.0} round trips/s (median)"
    );
    println!(
        "  control   PickPrefill(2,000 pages) + PickDecode + Release ×2  {kv_rate:>9.0} round trips/s (median)"
    );
    let ratio = kv_rate / kv_echo;
    println!("  ratio control / echo: {ratio:.2}  (goal ≥ 0.80: {})", verdict(ratio >= 0.8));
    let paired: Vec<String> = kv.echo.iter().zip(&kv.control).map(|(e, c)| format!("{:.2}", c / e)).collect();
    println!("  per round: echo {:.0?}, control {:.0?}; ratios {}", kv.echo, kv.control, paired.join(" "));
    let varint = median(kv.varint.clone());
    println!(
        "  the same with the hashes as int64 varints (page_hashes, older clients)  {varint:>9.0} round trips/s (median), {:.2} of echo; fixed / varint {:.2}",
        varint / kv_echo,
        kv_rate / varint
    );

    println!(
        "control batched picks: {} decode picks per client and turn, {} clients",
        batch::BATCH,
        args.clients
    );
    println!(
        "  one RPC each   {}× (PickDecode + Release)       {:>9.0} picks/s (median)",
        batch::BATCH,
        batched.unary
    );
    println!("  batched        PickMany + ReleaseMany          {:>9.0} picks/s (median)", batched.batched);
    let ratios: Vec<String> = batched.ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!(
        "  ratio batched / one each: {:.2} (per round {})",
        batched.batched / batched.unary,
        ratios.join(" ")
    );

    println!();
    println!(
        "in-process pick + book (mode on, W = 1e6, {WARM_PER_TARGET} warm reservations per target), {} picks each",
        args.picks
    );
    println!(
        "  {:>7} {:>9} {:>9} {:>9} {:>17} {:>14}",
        "targets", "p50 µs", "p99 µs", "max µs", "p99 / p99(first)", "targets ratio"
    );
    let mut first: Option<(u32, f64)> = None;
    let mut rows = Vec::new();
    for &n in &args.targets {
        let (p50, p99, max) = pick_cost(n, args.picks, args.seed);
        let (n0, p0) = *first.get_or_insert((n, p99));
        println!(
            "  {:>7} {:>9.2} {:>9.2} {:>9.2} {:>17.1} {:>14.1}",
            n,
            p50,
            p99,
            max,
            p99 / p0,
            f64::from(n) / f64::from(n0)
        );
        rows.push((n, p99));
    }
    if let Some((_, p99)) = rows.iter().find(|(n, _)| *n == 512) {
        println!("  goal p99 < 20 µs at 512 targets: {} ({p99:.2} µs)", verdict(*p99 < 20.0));
    }
    if let (Some((n0, p0)), Some((n1, p1))) = (rows.first(), rows.last()) {
        let growth = p1 / p0;
        let linear = f64::from(*n1) / f64::from(*n0);
        println!(
            "  goal growth no worse than linear: {} (×{growth:.1} for ×{linear:.0} targets)",
            verdict(growth <= linear)
        );
    }
    Ok(())
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// The plain rounds' medians, in round trips per second, and the batched round.
struct Plain {
    echo: f64,
    control: f64,
    batched: batch::Batched,
}

async fn round_trips(args: &ControlArgs) -> anyhow::Result<Plain> {
    let workers =
        format!("[[workers]]\nid='d'\nrole='decode'\nurl='http://stub'\nmodel='m'\ndp_size={DECODE_RANKS}\n");
    let served = serve(&workers, args.clients).await?;
    let Served { routers, echoes, lease, .. } = &served;

    let round = Duration::from_millis(args.round_ms);
    // Warm-up: connections, allocators, the ledger's maps.
    measure(echoes, round / 4, echo_round_trip).await?;
    let lease = lease.clone();
    let pick = move |c| pick_round_trip(c, lease.clone());
    measure(routers, round / 4, pick.clone()).await?;
    let (mut echo_rates, mut control_rates) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        echo_rates.push(measure(echoes, round, echo_round_trip).await?);
        control_rates.push(measure(routers, round, pick.clone()).await?);
    }
    let batched = batch::round_trips(args, &served).await?;
    Ok(Plain { echo: median(echo_rates), control: median(control_rates), batched })
}

/// Control and its echo baseline, served in this process on port 0.
struct Served {
    /// `clients` connections to control's Router.
    routers: Vec<RouterClient<Channel>>,
    /// As many connections to the echo service.
    echoes: Vec<EchoClient<Channel>>,
    /// A lease opened on control for the picks.
    lease: String,
    /// The workers' engines (they answer `/server_info` only) and the workers file naming them.
    _engines: (EngineStubs, tempfile::NamedTempFile),
}

/// Serves control (the workers of `workers`, a workers file's text whose URLs are replaced by
/// engine stubs', decode demand on, W = 1,000,000) once every worker is routable, and the echo
/// service, connects `clients` clients to each and opens a lease.
async fn serve(workers: &str, clients: usize) -> anyhow::Result<Served> {
    let registered = infera_control::workers_file::parse(workers, std::path::Path::new("bench workers"))?;
    let targets: usize = registered.iter().map(|r| r.dp_size.unwrap_or(1) as usize).sum();
    let engines = EngineStubs::start(registered).await?;
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), infera_launcher::records::workers_file(&engines.records))?;
    let flags = ControlFlags::try_parse_from([
        "infera-control",
        "--workers",
        file.path().to_str().expect("utf-8 temp path"),
        "--decode-input-demand",
        "on",
        "--decode-request-weight",
        "1000000",
    ])?;
    let config = Config::try_from(flags)?;
    let grpc = TcpListener::bind("127.0.0.1:0").await?;
    let metrics = TcpListener::bind("127.0.0.1:0").await?;
    let control_addr = grpc.local_addr()?;
    tokio::spawn(infera_control::run(
        Listeners { grpc, admin: None, metrics },
        config,
        std::future::pending(),
    ));
    let echo_listener = TcpListener::bind("127.0.0.1:0").await?;
    let echo_addr = echo_listener.local_addr()?;
    echo::spawn(echo_listener);

    let connect = |addr: std::net::SocketAddr| async move {
        Channel::from_shared(format!("http://{addr}"))
            .expect("a socket address is a valid URI")
            .connect()
            .await
    };
    let (mut routers, mut echoes) = (Vec::new(), Vec::new());
    for _ in 0..clients {
        routers.push(RouterClient::new(connect(control_addr).await?));
        echoes.push(EchoClient::new(connect(echo_addr).await?));
    }
    let lease = routers[0]
        .clone()
        .open_lease(pb::OpenLeaseRequest { holder: "bench".into(), ttl_ms: 300_000 })
        .await?
        .into_inner()
        .lease_id;
    let mut admin = AdminClient::new(connect(control_addr).await?);
    infera_testkit::poll(Duration::from_secs(30), "control to route to every worker", async || {
        let rows = admin.list_targets(pb::ListTargetsRequest::default()).await.ok()?.into_inner();
        (rows.targets.len() == targets).then_some(())
    })
    .await?;
    Ok(Served { routers, echoes, lease, _engines: (engines, file) })
}

async fn echo_round_trip(mut c: EchoClient<Channel>) -> Result<EchoClient<Channel>, tonic::Status> {
    // Two calls with a payload the size of a pick request, as a round trip is two RPCs.
    for _ in 0..2 {
        c.echo(EchoMessage { payload: vec![7; 64] }).await?;
    }
    Ok(c)
}

async fn pick_round_trip(
    mut c: RouterClient<Channel>,
    lease: String,
) -> Result<RouterClient<Channel>, tonic::Status> {
    let picked = c.pick_decode(decode_pick(lease, "bench-request".into())).await?.into_inner();
    let release = pb::ReleaseRequest {
        reservation_id: picked.reservation_id,
        reason: pb::ReleaseReason::Eof as i32,
        failure: 0,
    };
    c.release(release).await?;
    Ok(c)
}

/// A decode pick of 4,096 input tokens on model `m`.
pub(super) fn decode_pick(lease_id: String, request_id: String) -> pb::PickRequest {
    pb::PickRequest {
        lease_id,
        request_id,
        model: "m".into(),
        input_tokens: 4096,
        session_key: String::new(),
        page_hashes: Vec::new(),
        fixed_page_hashes: Vec::new(),
        page_size: 0,
        exclude: Vec::new(),
        ..Default::default()
    }
}

/// Round trips per second of `clients` looping `trip` for `round`.
pub(super) async fn measure<C, F, Fut>(clients: &[C], round: Duration, trip: F) -> anyhow::Result<f64>
where
    C: Clone + Send + 'static,
    F: Fn(C) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<C, tonic::Status>> + Send,
{
    let start = Instant::now();
    let end = start + round;
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|mut c| {
            let trip = trip.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < end {
                    c = trip(c).await?;
                    n += 1;
                }
                Ok::<u64, tonic::Status>(n)
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// p50, p99 and max microseconds of one pick + book with `n` decode targets.
fn pick_cost(n: u32, picks: usize, seed: u64) -> (f64, f64, f64) {
    let workers = (0..n.div_ceil(DECODE_RANKS)).map(|i| {
        let url = format!("http://10.0.{}.{}:30000", i / 256, i % 256);
        WorkerRecord::decode(&format!("decode-{i}"), url, "m", DECODE_RANKS.min(n - i * DECODE_RANKS))
            .with_page_size(64)
    });
    let settings = core_settings(RequestWeight::new(1e6).expect("valid weight"));
    let mut core = RoutingCore::new(View::new(workers), settings, 1, SmallRng::seed_from_u64(seed))
        .expect("valid settings");
    let now = Instant::now();
    let wall = SystemTime::now();
    let caller = infera_control::identity::Identity::anonymous();
    let lease =
        core.open_lease("bench".into(), &caller, Duration::from_secs(300), now).expect("a lease").lease;
    let mut rng = SmallRng::seed_from_u64(seed);
    let request = |rng: &mut SmallRng, lease: LeaseId| PickRequest {
        lease,
        request_id: RequestId::new("bench"),
        model: ModelName::new("m"),
        input_tokens: rng.random_range(1_000..200_000),
        session: None,
        page_hashes: Vec::new(),
        page_size: 0,
        exclude: Vec::new(),
        admission: Default::default(),
    };
    for _ in 0..n as usize * WARM_PER_TARGET {
        let req = request(&mut rng, lease);
        core.pick(
            PickKind::Decode,
            &req,
            PickContext { caller: &caller, kv: None, record_decision: false, now, wall, kv_room: None },
        )
        .expect("warm-up pick");
    }
    let mut samples = Vec::with_capacity(picks);
    for _ in 0..picks {
        let req = request(&mut rng, lease);
        let t0 = Instant::now();
        let picked = core
            .pick(
                PickKind::Decode,
                &req,
                PickContext { caller: &caller, kv: None, record_decision: false, now, wall, kv_room: None },
            )
            .expect("pick");
        samples.push(t0.elapsed());
        core.release(Release::new(picked.reservation, ReleaseReason::Eof), &caller, now).expect("release");
    }
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (us(samples[picks / 2]), us(samples[picks * 99 / 100]), us(samples[picks - 1]))
}

/// The settings the in-process benchmarks pick with: mode on with `weight`, cache-aware prefill
/// at credit 1, no session stickiness, long leases.
pub(crate) fn core_settings(weight: RequestWeight) -> Settings {
    Settings {
        mode: DecodeInputDemand::On,
        weight,
        policy: DecodePolicy::RoundRobin,
        prefill_policy: infera_proto::types::PrefillPolicy::CacheAware,
        overlap_credit: infera_control::settings::OverlapCredit::new(1.0).expect("valid credit"),
        session_slack_tokens: 0,
        session_ttl: Duration::from_secs(600),
        session_max: 1_000_000,
        lease_ttl: Duration::from_secs(300),
        prefilling_weight: Default::default(),
        prefilling_age_decay: Default::default(),
    }
}

//! Command line (every flag also an `INFERA_*` environment variable) → validated [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser};
use infera_proto::types::{
    DecodeInputDemand, DecodePolicy, PrefillPolicy, RegisteredWorker, RequestWeight, WeightNeedsDemand,
};

use crate::fit::WeightMode;

mod admission;
mod grpc;
mod limits;
mod listen;
mod router_auth;
mod tls;
mod weight;
mod workers_tls;

pub use admission::AdmissionConfig;
pub use grpc::GrpcLimits;
pub use listen::ListenError;
pub use router_auth::RouterAuthError;
pub use tls::ControlTls;

use crate::settings::{AgeDecay, OverlapCredit, PrefillingWeight, Settings};
use crate::workers_file::{self, WorkersFileError};
use infera_registry::{EtcdConfig, EtcdConfigError};
use infera_runtime::telemetry::{LogFilterError, TelemetryArgs, TelemetryConfig};
use limits::{BoundArgs, CapacityArgs, EjectionArgs, ReplicaArgs};
use listen::ListenArgs;
use weight::WeightArg;

/// infera-control: the central demand ledger and scoring service.
#[derive(Parser, Debug)]
#[command(name = "infera-control", version, about, long_about = None)]
pub struct Args {
    #[command(flatten)]
    grpc_limits: grpc::GrpcLimitArgs,
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    registry: RegistryArgs,
    #[command(flatten)]
    etcd: EtcdArgs,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    decode: DecodeArgs,
    #[command(flatten)]
    prefill: PrefillArgs,
    #[command(flatten)]
    leases: LeaseArgs,
    #[command(flatten)]
    replicas: ReplicaArgs,
    #[command(flatten)]
    ejection: EjectionArgs,
    #[command(flatten)]
    capacity: CapacityArgs,
    #[command(flatten)]
    admission: admission::AdmissionArgs,
    #[command(flatten)]
    bounds: BoundArgs,
    #[command(flatten)]
    router_auth: router_auth::RouterAuthArgs,
    #[command(flatten)]
    admin: AdminArgs,
    #[command(flatten)]
    tls: tls::TlsArgs,
    #[command(flatten)]
    worker_tls: workers_tls::WorkerTlsArgs,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Registry")]
#[group(required = true, multiple = false)]
struct RegistryArgs {
    /// Static workers file (TOML, `[[workers]]` entries): the embedded default registry.
    #[arg(long, env = "INFERA_CONTROL_WORKERS")]
    workers: Option<PathBuf>,
    /// etcd endpoints (comma-separated): workers are read from `/infera/v1/workers/` and
    /// followed as they register and leave.
    #[arg(long, env = "INFERA_CONTROL_ETCD", value_delimiter = ',')]
    etcd: Vec<String>,
}

infera_registry::etcd_security_args!(
    /// How control reaches a secured etcd (manual/operations/etcd.md): TLS, its client
    /// certificate, its etcd user.
    #[command(next_help_heading = "Registry: a secured etcd")]
    struct EtcdArgs, "INFERA_CONTROL_ETCD"
);

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Engine readings")]
struct EngineArgs {
    /// How often each worker's `GET /v1/loads` is read (ms): the engine readings of
    /// `Admin/ListTargets` and the `infera_router_engine_*` gauges. 0 turns them off.
    #[arg(long, env = "INFERA_ENGINE_POLL_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    engine_poll_ms: u64,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Decode selection")]
struct DecodeArgs {
    /// off: the legacy policy selects; shadow: the legacy policy selects and the cost
    /// suggestion is recorded; on: the lowest cost wins. The ledger books in every mode.
    #[arg(long, env = "INFERA_DECODE_INPUT_DEMAND", value_enum, default_value_t = DecodeInputDemand::Off)]
    decode_input_demand: DecodeInputDemand,
    /// W: tokens charged per request a decode target holds,
    /// cost = booked input tokens + request tokens + W × held requests. 0 = token-only demand;
    /// W > 0 needs --decode-input-demand shadow or on. `auto`: each decode pool's W is fitted
    /// online from its engines' step times (`decode_moments` of `GET /v1/loads`), with
    /// --decode-request-weight-fallback until a fit is trusted.
    #[arg(long, env = "INFERA_DECODE_REQUEST_WEIGHT", default_value = "0", allow_negative_numbers = true)]
    decode_request_weight: WeightArg,
    /// With --decode-request-weight auto: the W of a decode pool none of whose workers has a
    /// trusted fit yet (tokens per request; W > 0 needs --decode-input-demand shadow or on).
    /// The default is the original study's hand fit: token-only demand (0) is the one setting the study
    /// measured clearly worse (manual/features/decode_balancing.md).
    #[arg(
        long,
        env = "INFERA_DECODE_REQUEST_WEIGHT_FALLBACK",
        default_value = "1000000",
        allow_negative_numbers = true
    )]
    decode_request_weight_fallback: RequestWeight,
    /// Half-life of the W fit's memory (ms): a poll interval this old weighs half as much as
    /// the newest. Fitted W in force also moves toward the fit with this time constant.
    #[arg(long, env = "INFERA_DECODE_WEIGHT_FIT_HALF_LIFE_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    decode_weight_fit_half_life_ms: u64,
    /// The legacy decode policy (selects in off and shadow modes).
    #[arg(long, env = "INFERA_DECODE_POLICY", value_enum, default_value_t = DecodePolicy::RoundRobin)]
    decode_policy: DecodePolicy,
    /// How much a held request (and its tokens) still in prefill counts in the decode cost,
    /// relative to one past its prefill (0–4; its request's prefill reservation is live).
    /// 1 counts them alike: the cost as it always was.
    #[arg(long, env = "INFERA_DECODE_PREFILLING_WEIGHT", default_value = "1", allow_negative_numbers = true)]
    decode_prefilling_weight: PrefillingWeight,
    /// Whether a held request still in prefill counts less in the decode cost the longer it has
    /// been prefilling: min(1, median prefill phase of its model / its age) of a request and of
    /// its tokens. Fleet admission (`--admission on`) counts it whole either way.
    #[arg(long, env = "INFERA_DECODE_PREFILLING_AGE_DECAY", value_enum, default_value_t = AgeDecay::On)]
    decode_prefilling_age_decay: AgeDecay,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Prefill selection")]
struct PrefillArgs {
    /// cache-aware: in-flight prefill tokens minus the KV overlap credit, with session affinity;
    /// round-robin: each prefill target in turn (a baseline to measure cache-aware routing by).
    #[arg(long, env = "INFERA_PREFILL_POLICY", value_enum, default_value_t = PrefillPolicy::CacheAware)]
    prefill_policy: PrefillPolicy,
    /// Cost credit per prompt token a prefill target holds in its KV cache (0–100):
    /// cost = in-flight prefill tokens + request tokens − credit × cached tokens. 1 counts only
    /// the tokens this pick would not compute; the default 8 also values what the pool does not
    /// recompute and the prefix kept whole for the next turn (measured: manual, KV-aware routing).
    #[arg(long, env = "INFERA_PREFILL_OVERLAP_CREDIT", default_value = "8", allow_negative_numbers = true)]
    prefill_overlap_credit: OverlapCredit,
    /// A session keeps its previous prefill target unless that target's load exceeds the
    /// least-loaded one's by more than this many tokens.
    #[arg(long, env = "INFERA_PREFILL_SESSION_SLACK_TOKENS", default_value_t = 32_768)]
    prefill_session_slack_tokens: u64,
    /// Milliseconds of inactivity after which a session forgets its prefill target
    /// (at most one day; 0 turns session affinity off).
    #[arg(long, env = "INFERA_SESSION_TTL_MS", default_value_t = 600_000,
          value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    session_ttl_ms: u64,
    /// Most sessions remembered for prefill affinity (each key ≤ 256 bytes); at the cap the
    /// session used least recently is forgotten (`infera_router_sessions_evicted_total`).
    #[arg(long, env = "INFERA_SESSION_MAX", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    session_max: u64,
    /// Most KV blocks the prefix index records over all targets (about 47 bytes each, 128 for an
    /// engine that namespaces its hashes); past it new blocks are not recorded, which can only
    /// under-state an overlap.
    #[arg(long, env = "INFERA_KV_INDEX_MAX_BLOCKS", default_value_t = 4_000_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    kv_index_max_blocks: u64,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Leases")]
struct LeaseArgs {
    /// Lease TTL for proxies that ask for none (a proxy's own request is clamped to 100 ms – 300 s).
    #[arg(long, env = "INFERA_LEASE_TTL_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..=300_000))]
    lease_ttl_ms: u64,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Admin")]
struct AdminArgs {
    /// Bearer token every Admin call must carry (`authorization: Bearer <token>`). Unset = open.
    #[arg(long, env = "INFERA_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Seed for tie-breaks and the random legacy policies (tests); unset = from the OS.
    #[arg(long, env = "INFERA_CONTROL_SEED")]
    seed: Option<u64>,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// gRPC address.
    pub listen: SocketAddr,
    /// The Admin service's own address (`None`: Admin is served on `listen`).
    pub admin_listen: Option<SocketAddr>,
    /// `/metrics` address.
    pub metrics_listen: SocketAddr,
    /// What a connection to the gRPC sockets may cost.
    pub grpc_limits: GrpcLimits,
    /// The workers of the static file (empty with etcd); `dp_size` may be left out.
    pub workers: Vec<RegisteredWorker>,
    /// etcd: endpoints, TLS and credentials; `None` = the static file is the registry.
    pub etcd: Option<EtcdConfig>,
    /// How often workers' `/v1/loads` is read; `None`: never.
    pub engine_poll: Option<Duration>,
    /// Routing settings at start (with W fitted, `weight` is the fallback).
    pub settings: Settings,
    /// Pinned or fitted W.
    pub weight_mode: WeightMode,
    /// The W fit's forgetting half-life.
    pub fit_half_life: Duration,
    /// The KV prefix index's block budget.
    pub kv_index_max_blocks: usize,
    /// gRPC over TLS (`--tls-cert`).
    pub tls: Option<ControlTls>,
    /// How `https://` workers are read (`--worker-ca`).
    pub worker_tls: Option<infera_runtime::serve::worker_client::WorkerTlsFiles>,
    /// Admin bearer token.
    pub admin_token: Option<String>,
    /// The URL to advertise (`None`: from the bound address).
    pub advertise_url: Option<String>,
    /// The Admin URL to advertise with `admin_listen` (`None`: from its bound address).
    pub admin_advertise_url: Option<String>,
    /// The leader lease's TTL (with etcd).
    pub leader_ttl: Duration,
    /// Outlier ejection's thresholds.
    pub ejection: crate::ejection::EjectionPolicy,
    /// Per-rank caps.
    pub capacity: crate::capacity::Capacity,
    /// Fleet admission and the class book.
    pub admission: AdmissionConfig,
    /// What one identity may hold or send.
    pub bounds: crate::bounds::Bounds,
    /// What Router callers prove who they are with (none: the Router is open).
    pub router: crate::auth::RouterCredentials,
    /// RNG seed.
    pub seed: Option<u64>,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
}

impl Config {
    /// Whether no worker can ever be picked: the registry is the static file (no etcd, from which
    /// workers would arrive later) and that file lists none.
    pub fn has_no_workers(&self) -> bool {
        self.etcd.is_none() && self.workers.is_empty()
    }
}

/// A configuration that cannot start (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The workers file.
    #[error(transparent)]
    Workers(#[from] WorkersFileError),
    /// The class file.
    #[error(transparent)]
    Classes(#[from] crate::classes::ClassFileError),
    /// The telemetry flags.
    #[error(transparent)]
    Telemetry(#[from] LogFilterError),
    /// W > 0 without demand, said in the flags' terms.
    #[error(
        "--decode-request-weight {} needs --decode-input-demand shadow or on (got {}); \
         W only takes part in the demand cost",
        .0.weight,
        .0.mode
    )]
    WeightNeedsDemand(WeightNeedsDemand),
    /// The Listen flags do not go together.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// A TLS file cannot be used.
    #[error("--tls-cert/--tls-key/--tls-client-ca/--tls-peer-ca: {0}")]
    Tls(#[from] infera_runtime::serve::tls::TlsError),
    /// A worker TLS file cannot be used.
    #[error("--worker-ca/--worker-cert/--worker-key: {0}")]
    WorkerTls(infera_runtime::serve::tls::TlsError),
    /// The etcd settings do not go together, or a file of theirs cannot be used.
    #[error("etcd: {0}")]
    Etcd(#[from] EtcdConfigError),
    /// The Router's credentials cannot be used, or an open Router on a reachable address.
    #[error(transparent)]
    RouterAuth(#[from] RouterAuthError),
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(a: Args) -> Result<Self, ConfigError> {
        let (weight_mode, weight) = match a.decode.decode_request_weight {
            WeightArg::Pinned(w) => (WeightMode::Pinned, w),
            WeightArg::Auto => (WeightMode::Auto, a.decode.decode_request_weight_fallback),
        };
        let settings = Settings {
            mode: a.decode.decode_input_demand,
            weight,
            policy: a.decode.decode_policy,
            prefill_policy: a.prefill.prefill_policy,
            overlap_credit: a.prefill.prefill_overlap_credit,
            session_slack_tokens: a.prefill.prefill_session_slack_tokens,
            session_ttl: Duration::from_millis(a.prefill.session_ttl_ms),
            session_max: usize::try_from(a.prefill.session_max).unwrap_or(usize::MAX),
            lease_ttl: Duration::from_millis(a.leases.lease_ttl_ms),
            prefilling_weight: a.decode.decode_prefilling_weight,
            prefilling_age_decay: a.decode.decode_prefilling_age_decay,
        };
        settings.validate().map_err(ConfigError::WeightNeedsDemand)?;
        let admin_advertise_url = a.replicas.admin_advertise_url.filter(|u| !u.is_empty());
        a.listen.check(admin_advertise_url.as_deref())?;
        let tls = a.tls.into_config()?;
        let client_certificates = tls.as_ref().is_some_and(|t| t.server.requires_client_certificates());
        let router = a.router_auth.into_credentials(client_certificates, a.listen.listen)?;
        Ok(Self {
            listen: a.listen.listen,
            admin_listen: a.listen.admin_listen,
            metrics_listen: a.listen.metrics_listen,
            grpc_limits: a.grpc_limits.into(),
            workers: match &a.registry.workers {
                Some(path) => workers_file::load(path)?,
                None => Vec::new(),
            },
            etcd: etcd(a.registry.etcd, a.etcd)?,
            engine_poll: (a.engine.engine_poll_ms > 0)
                .then(|| Duration::from_millis(a.engine.engine_poll_ms)),
            settings,
            weight_mode,
            fit_half_life: Duration::from_millis(a.decode.decode_weight_fit_half_life_ms),
            kv_index_max_blocks: usize::try_from(a.prefill.kv_index_max_blocks).unwrap_or(usize::MAX),
            tls,
            worker_tls: {
                let files = a.worker_tls.files();
                if let Some(f) = &files {
                    infera_runtime::serve::worker_client::worker_tls(f).map_err(ConfigError::WorkerTls)?;
                }
                files
            },
            admin_token: a.admin.admin_token.filter(|t| !t.is_empty()),
            advertise_url: a.replicas.advertise_url.filter(|u| !u.is_empty()),
            admin_advertise_url,
            leader_ttl: Duration::from_secs(a.replicas.leader_lease_ttl_secs),
            ejection: a.ejection.policy(),
            capacity: a.capacity.caps(),
            admission: a.admission.config()?,
            bounds: a.bounds.bounds(),
            router,
            seed: a.admin.seed,
            telemetry: a.telemetry.into_config("infera-control")?,
        })
    }
}

/// The etcd settings, checked, their files read once (`None` without endpoints).
fn etcd(endpoints: Vec<String>, args: EtcdArgs) -> Result<Option<EtcdConfig>, EtcdConfigError> {
    let endpoints: Vec<String> = endpoints.into_iter().filter(|e| !e.trim().is_empty()).collect();
    let config = EtcdConfig::new(endpoints, args.security())?;
    if config.endpoints().is_empty() {
        return Ok(None);
    }
    config.check_files()?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::admission::PrefillGuard;

    #[test]
    fn the_command_line_keeps_the_conventions() {
        infera_runtime::cli::check_conventions(Args::command());
    }

    #[test]
    fn modes_and_weights_parse() {
        let a = Args::try_parse_from([
            "infera-control",
            "--workers",
            "w.toml",
            "--decode-input-demand",
            "shadow",
            "--decode-request-weight",
            "180000",
            "--decode-policy",
            "power-of-two",
        ])
        .unwrap();
        assert_eq!(a.decode.decode_input_demand, DecodeInputDemand::Shadow);
        assert_eq!(a.decode.decode_request_weight, WeightArg::Pinned(RequestWeight::new(180_000.0).unwrap()));
        assert_eq!(a.decode.decode_policy, DecodePolicy::PowerOfTwo);
        for bad in [
            ["--decode-request-weight", "-1"],
            ["--decode-request-weight", "NaN"],
            ["--decode-input-demand", "maybe"],
        ] {
            let mut argv = vec!["infera-control", "--workers", "w.toml"];
            argv.extend(bad);
            assert!(Args::try_parse_from(argv).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn auto_fits_w_with_the_fallback_until_then() {
        let base = ["infera-control", "--workers", "/dev/null", "--decode-input-demand", "shadow"];
        let parse = |extra: &[&str]| Args::try_parse_from([&base[..], extra].concat());
        let a = parse(&["--decode-request-weight", "auto", "--decode-request-weight-fallback", "180000"])
            .unwrap();
        assert_eq!(a.decode.decode_request_weight, WeightArg::Auto);
        assert_eq!(a.decode.decode_weight_fit_half_life_ms, 60_000);
        let c = Config::try_from(a).unwrap();
        assert_eq!((c.weight_mode, c.settings.weight.get()), (WeightMode::Auto, 180_000.0));
        assert_eq!(c.fit_half_life, Duration::from_secs(60));
        // The fallback defaults to the original study's hand fit, not to token-only demand.
        let c = Config::try_from(parse(&["--decode-request-weight", "AUTO"]).unwrap()).unwrap();
        assert_eq!((c.weight_mode, c.settings.weight.get()), (WeightMode::Auto, 1_000_000.0));
        // auto needs demand: with `off` its fallback W is refused, as a pinned W > 0 is.
        let off = ["infera-control", "--workers", "/dev/null", "--decode-request-weight", "auto"];
        assert!(Config::try_from(Args::try_parse_from(off).unwrap()).is_err());
        let c = Config::try_from(
            parse(&["--decode-request-weight", "5", "--decode-request-weight-fallback", "9"]).unwrap(),
        )
        .unwrap();
        assert_eq!(
            (c.weight_mode, c.settings.weight.get()),
            (WeightMode::Pinned, 5.0),
            "the fallback is for auto only"
        );
        for bad in
            [&["--decode-request-weight", "automatic"][..], &["--decode-weight-fit-half-life-ms", "10"]]
        {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_prefill_guard_is_off_by_default_and_can_read_the_queue() {
        let base = ["infera-control", "--workers", "/dev/null", "--admission", "on"];
        let parse = |extra: &[&str]| Args::try_parse_from([&base[..], extra].concat());
        let c = Config::try_from(parse(&[]).unwrap()).unwrap();
        assert_eq!((c.admission.on, c.admission.prefill_guard), (true, PrefillGuard::Off));
        let c = Config::try_from(parse(&["--admission-prefill-guard", "queue"]).unwrap()).unwrap();
        assert_eq!(c.admission.prefill_guard, PrefillGuard::Queue);
        assert!(parse(&["--admission-prefill-guard", "top-class"]).is_err());
    }

    #[test]
    fn the_overlap_credit_defaults_to_8_and_rejects_what_is_not_a_credit() {
        let base = ["infera-control", "--workers", "w.toml"];
        let a = Args::try_parse_from(base).unwrap();
        assert_eq!(a.prefill.prefill_overlap_credit.get(), 8.0);
        let a = Args::try_parse_from([&base[..], &["--prefill-overlap-credit", "0"]].concat()).unwrap();
        assert_eq!(a.prefill.prefill_overlap_credit.get(), 0.0);
        for bad in ["-1", "100.5", "NaN", "inf", "eight"] {
            let argv = [&base[..], &["--prefill-overlap-credit", bad]].concat();
            let e = Args::try_parse_from(argv).unwrap_err();
            assert!(e.to_string().contains("prefill overlap credit must be"), "{bad}: {e}");
        }
    }
}

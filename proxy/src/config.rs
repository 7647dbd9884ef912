//! Command line (every flag also an `INFERA_PROXY_*` environment variable) → validated [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser};

use infera_runtime::telemetry::{LogFilterError, TelemetryArgs, TelemetryConfig};

mod connections;
mod tls;
mod tokenizer;
mod workers;

pub use connections::Connections;

pub use tls::TlsConfig;

/// infera-proxy: a stateless HTTP proxy in front of SGLang workers, routed by infera-control.
#[derive(Parser, Debug)]
#[command(name = "infera-proxy", version, about, long_about = None)]
pub struct Args {
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    control: ControlArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    connections: connections::ConnectionArgs,
    #[command(flatten)]
    worker_tls: workers::WorkerTlsArgs,
    #[command(flatten)]
    clients: ClientArgs,
    #[command(flatten)]
    tokenizer: tokenizer::TokenizerArgs,
    #[command(flatten)]
    tls: tls::TlsArgs,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Listen")]
struct ListenArgs {
    /// HTTP address (OpenAI + SGLang APIs, /health, and /metrics unless --metrics-listen).
    /// Port 0 picks a free port.
    #[arg(long, env = "INFERA_PROXY_LISTEN", default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// This proxy's name in control's lease table; default `infera-proxy@<listen address>` (the
    /// host name for an unspecified address). A new control leader waits for every proxy by
    /// this name: give each proxy its own.
    #[arg(long, env = "INFERA_PROXY_NAME")]
    name: Option<String>,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Control")]
struct ControlArgs {
    /// infera-control's gRPC URL, or the URLs of its HA replicas (comma-separated): the proxy
    /// talks to the leader, found by asking in turn and following the leader a replica names.
    #[arg(
        long,
        env = "INFERA_PROXY_CONTROL",
        default_value = "http://127.0.0.1:50051",
        value_delimiter = ','
    )]
    control: Vec<String>,
    /// Deadline of one pick round trip to control; past it the request is routed locally
    /// from the last known target list (and counted as a fallback).
    #[arg(long, env = "INFERA_PROXY_PICK_TIMEOUT_MS", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pick_timeout_ms: u64,
    /// Lease TTL asked of control; the proxy renews it every TTL/3.
    #[arg(long, env = "INFERA_PROXY_LEASE_TTL_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(300..=300_000))]
    lease_ttl_ms: u64,
    /// How often the fallback target list is refreshed from control.
    #[arg(long, env = "INFERA_PROXY_TARGETS_REFRESH_MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(50..=600_000))]
    targets_refresh_ms: u64,
    /// A file holding this proxy's token for control (one line; a Kubernetes Secret's key
    /// mounted as a file): every Router call carries `authorization: Bearer <token>`, which control
    /// checks against its --router-tokens. Read again on SIGHUP. (With mutual TLS the client
    /// certificate, --control-cert, proves the proxy without a token.)
    #[arg(long, env = "INFERA_PROXY_CONTROL_TOKEN_FILE", value_name = "FILE")]
    control_token_file: Option<PathBuf>,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Clients")]
struct ClientArgs {
    /// API keys file (TOML `[[keys]]` with `name`, `sha256` of the key and an optional
    /// `tokens_per_second`; or one key per line): every generation request and `/v1/models`
    /// then needs `Authorization: Bearer <key>`. Read again on SIGHUP.
    #[arg(long, env = "INFERA_PROXY_API_KEYS")]
    api_keys: Option<PathBuf>,
    /// Send the client's `Authorization` header on to the workers even with `--api-keys` (for
    /// workers started with their own `--api-key`). Without `--api-keys` it is always sent.
    #[arg(long, env = "INFERA_PROXY_FORWARD_AUTHORIZATION")]
    forward_authorization: bool,
    /// One access log line per request (`tracing` target `access`, at info: its id, API, model,
    /// key name, prefill and decode targets, status, outcome, tokens and durations).
    #[arg(long, env = "INFERA_PROXY_ACCESS_LOG", default_value_t = true, action = clap::ArgAction::Set)]
    access_log: bool,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Limits")]
struct LimitArgs {
    /// Largest request body accepted (413 above).
    #[arg(long, env = "INFERA_PROXY_MAX_BODY_BYTES", default_value_t = 32 << 20)]
    max_body_bytes: usize,
    /// Most JSON values a request body may parse into (each scalar, array, object and object
    /// key; 413 above): what bounds the memory of the parsed request, ≈ 50 bytes a value. A
    /// 128 k-token `input_ids` array is 128 k values.
    #[arg(long, env = "INFERA_PROXY_MAX_BODY_VALUES", default_value_t = 1 << 20,
          value_parser = clap::value_parser!(u64).range(1_000..=1 << 30))]
    max_body_values: u64,
    /// The bytes every request body held at once may add up to (read, parsed and served):
    /// a body that would pass it is answered 503 `overloaded` with Retry-After, so that many
    /// large bodies at once cannot exhaust memory. At least --max-body-bytes.
    #[arg(long, env = "INFERA_PROXY_MAX_BODY_BYTES_IN_FLIGHT", default_value_t = 1 << 30)]
    max_body_bytes_in_flight: usize,
    /// Most generation requests in flight through this proxy; above it requests wait in a
    /// queue. 0 = no limit.
    #[arg(long, env = "INFERA_PROXY_MAX_INFLIGHT", default_value_t = 0)]
    max_inflight: usize,
    /// Most requests waiting for a place in flight; more are answered 503 at once.
    #[arg(long, env = "INFERA_PROXY_QUEUE_DEPTH", default_value_t = 1_024)]
    queue_depth: usize,
    /// The longest a request waits for a place in flight (or, when control has every rank at
    /// its cap, for room), before a 503 with `Retry-After`.
    #[arg(long, env = "INFERA_PROXY_QUEUE_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    queue_timeout_ms: u64,
    /// Retries of a request whose leg failed before any byte reached the client (connect
    /// refused, 5xx, a prefill that died): each on a fresh pick that passes the failed target
    /// by. Never after bytes flowed.
    #[arg(long, env = "INFERA_PROXY_RETRIES", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(0..=10))]
    retries: u32,
    /// The base of the retries' backoff (ms): retry n waits a uniform random time up to
    /// base × 2^(n-1) (full jitter).
    #[arg(long, env = "INFERA_PROXY_RETRY_BACKOFF_MS", default_value_t = 25,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    retry_backoff_ms: u64,
    /// Each attempt's deadline for its first byte (a stream's first data frame; a non-streamed
    /// answer's head): past it the attempt fails as a timeout and, when a retry is left and the
    /// request's own timeout allows, is picked again elsewhere. 0 = none (the request's
    /// timeout only). Mind long prompts: a 100 k-token prefill in a queue takes a while.
    #[arg(long, env = "INFERA_PROXY_ATTEMPT_TIMEOUT_MS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    attempt_timeout_ms: u64,
    /// The longest a stream that has begun may go without a frame from the decode: past it the
    /// stream ends with an SSE error event and the decode leg fails as a timeout (a stuck
    /// engine). 0 = never.
    #[arg(long, env = "INFERA_PROXY_STREAM_IDLE_TIMEOUT_MS", default_value_t = 120_000,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    stream_idle_timeout_ms: u64,
    /// Timeout from accept to the head of the answer (504 when it passes first); a stream that
    /// has begun is not cut.
    #[arg(long, env = "INFERA_PROXY_REQUEST_TIMEOUT_MS", default_value_t = 1_800_000)]
    request_timeout_ms: u64,
    /// Connect timeout to workers.
    #[arg(long, env = "INFERA_PROXY_CONNECT_TIMEOUT_MS", default_value_t = 2_000)]
    connect_timeout_ms: u64,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP address.
    pub listen: SocketAddr,
    /// Name in control's lease table (completed with the bound address when unset).
    pub name: Option<String>,
    /// Control's URLs (one, or its replicas'): all `http://` or all `https://`.
    pub control: Vec<http::Uri>,
    /// The token every Router call carries (`--control-token-file`), reloadable.
    pub control_token: Option<Arc<crate::control::credential::ControlToken>>,
    /// Pick deadline.
    pub pick_timeout: Duration,
    /// Lease TTL.
    pub lease_ttl: Duration,
    /// Target-list refresh period.
    pub targets_refresh: Duration,
    /// Body limit.
    pub max_body_bytes: usize,
    /// How many JSON values a body may hold.
    pub max_body_values: usize,
    /// The bytes every body held at once may add up to.
    pub max_body_bytes_in_flight: usize,
    /// The listener's connection limits, the body deadline, the metrics address.
    pub connections: Connections,
    /// Timeout to the answer's head.
    pub request_timeout: Duration,
    /// The in-flight limit and its queue.
    pub admission: crate::admission::Limits,
    /// The API keys (`--api-keys`), when set.
    pub api_keys: Option<Arc<crate::keys::Keys>>,
    /// Whether the client's `Authorization` goes on to the workers.
    pub forward_authorization: bool,
    /// Whether each request writes an access log line.
    pub access_log: bool,
    /// Retries before the first byte.
    pub retries: u32,
    /// The retries' backoff base.
    pub retry_backoff: Duration,
    /// Each attempt's first-byte deadline.
    pub attempt_timeout: Option<Duration>,
    /// A begun stream's longest silence.
    pub stream_idle_timeout: Option<Duration>,
    /// Worker connect timeout.
    pub connect_timeout: Duration,
    /// How `https://` workers are reached (`--worker-ca`).
    pub worker_tls: Option<infera_runtime::serve::worker_client::WorkerTlsFiles>,
    /// HTTPS on the listener and to control.
    pub tls: TlsConfig,
    /// Each model's tokenizer: those of the flags, loaded at start, and those found from the
    /// workers later.
    pub tokenizers: Arc<crate::tokenizers::Tokenizers>,
    /// How often workers are probed for render parity (`None`: never).
    pub render_parity_interval: Option<Duration>,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
}

/// A configuration that cannot start (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The control URL.
    #[error("--control {url:?}: {reason}")]
    ControlUrl {
        /// What was given.
        url: String,
        /// Why it is unusable.
        reason: String,
    },
    /// The telemetry flags.
    #[error(transparent)]
    Telemetry(#[from] LogFilterError),
    /// A TLS file cannot be used.
    #[error("{flags}: {source}")]
    Tls {
        /// The flags the file came from.
        flags: &'static str,
        /// Why.
        source: infera_runtime::serve::tls::TlsError,
    },
    /// Control TLS flags without an `https://` control URL.
    #[error("--control-ca, --control-cert and --control-server-name need an https:// --control URL")]
    ControlTlsWithoutHttps,
    /// `http://` and `https://` control URLs together.
    #[error(
        "--control mixes https:// and http:// URLs: a proxy that reaches control over TLS never talks \
         to it in clear (give every replica's https:// URL)"
    )]
    MixedControlSchemes,
    /// A body budget smaller than one body.
    #[error(
        "--max-body-bytes-in-flight {budget} is below --max-body-bytes {body}: no body of the largest size could be read"
    )]
    BodyBudget {
        /// `--max-body-bytes-in-flight`.
        budget: usize,
        /// `--max-body-bytes`.
        body: usize,
    },
    /// `--control-token-file` cannot be used.
    #[error(transparent)]
    ControlToken(#[from] crate::control::credential::TokenFileError),
    /// `--api-keys` cannot be loaded.
    #[error(transparent)]
    Keys(#[from] crate::keys::KeysError),
    /// `--tokenizer`, `--chat-template` or `--model-tokenizer` cannot be loaded.
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::TokenizerFlagError),
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(a: Args) -> Result<Self, ConfigError> {
        let control = a.control.control.iter().map(|u| control_url(u)).collect::<Result<Vec<_>, _>>()?;
        if control.is_empty() {
            return Err(ConfigError::ControlUrl {
                url: String::new(),
                reason: "expected http://host:port".into(),
            });
        }
        let https = control.iter().any(|u| u.scheme_str() == Some("https"));
        if https && control.iter().any(|u| u.scheme_str() != Some("https")) {
            return Err(ConfigError::MixedControlSchemes);
        }
        if a.limits.max_body_bytes_in_flight < a.limits.max_body_bytes {
            let (budget, body) = (a.limits.max_body_bytes_in_flight, a.limits.max_body_bytes);
            return Err(ConfigError::BodyBudget { budget, body });
        }
        let worker_tls = a.worker_tls.files();
        if let Some(files) = &worker_tls {
            // Read now, so that a bad file stops the proxy (exit 64) with its name.
            infera_runtime::serve::worker_client::worker_tls(files).map_err(|source| ConfigError::Tls {
                flags: "--worker-ca/--worker-cert/--worker-key",
                source,
            })?;
        }
        let tls = a.tls.into_config(https)?;
        let control_token = a
            .control
            .control_token_file
            .map(crate::control::credential::ControlToken::load)
            .transpose()?
            .map(Arc::new);
        Ok(Self {
            listen: a.listen.listen,
            name: a.listen.name.filter(|n| !n.is_empty()),
            control,
            control_token,
            pick_timeout: Duration::from_millis(a.control.pick_timeout_ms),
            lease_ttl: Duration::from_millis(a.control.lease_ttl_ms),
            targets_refresh: Duration::from_millis(a.control.targets_refresh_ms),
            max_body_bytes: a.limits.max_body_bytes,
            max_body_values: usize::try_from(a.limits.max_body_values).unwrap_or(usize::MAX),
            max_body_bytes_in_flight: a.limits.max_body_bytes_in_flight,
            connections: a.connections.into(),
            request_timeout: Duration::from_millis(a.limits.request_timeout_ms),
            admission: crate::admission::Limits {
                max_inflight: a.limits.max_inflight,
                queue_depth: a.limits.queue_depth,
                queue_timeout: Duration::from_millis(a.limits.queue_timeout_ms),
            },
            forward_authorization: a.clients.forward_authorization || a.clients.api_keys.is_none(),
            access_log: a.clients.access_log,
            api_keys: a.clients.api_keys.map(crate::keys::Keys::load).transpose()?.map(Arc::new),
            retries: a.limits.retries,
            retry_backoff: Duration::from_millis(a.limits.retry_backoff_ms),
            attempt_timeout: (a.limits.attempt_timeout_ms > 0)
                .then(|| Duration::from_millis(a.limits.attempt_timeout_ms)),
            stream_idle_timeout: (a.limits.stream_idle_timeout_ms > 0)
                .then(|| Duration::from_millis(a.limits.stream_idle_timeout_ms)),
            connect_timeout: Duration::from_millis(a.limits.connect_timeout_ms),
            worker_tls,
            tls,
            render_parity_interval: a.tokenizer.render_parity_interval(),
            tokenizers: Arc::new(a.tokenizer.load()?),
            telemetry: a.telemetry.into_config("infera-proxy")?,
        })
    }
}

fn control_url(url: &str) -> Result<http::Uri, ConfigError> {
    let bad = |reason: String| ConfigError::ControlUrl { url: url.to_owned(), reason };
    let parsed: http::Uri = url.trim().parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
    if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
        return Err(bad("expected http://host:port".into()));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_keeps_the_conventions() {
        infera_runtime::cli::check_conventions(Args::command());
    }

    #[test]
    fn bad_control_urls_are_rejected() {
        for url in ["", "127.0.0.1:50051", "ftp://x", "http://a:1,ftp://x", "http://a:1,"] {
            let a = Args::try_parse_from(["infera-proxy", "--control", url]).unwrap();
            assert!(Config::try_from(a).is_err(), "{url:?} accepted");
        }
        let a = Args::try_parse_from(["infera-proxy", "--control", "http://a:1,http://b:2"]).unwrap();
        let c = Config::try_from(a).unwrap();
        assert_eq!(
            c.control.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["http://a:1/", "http://b:2/"]
        );
    }

    #[test]
    fn the_body_budget_holds_at_least_one_body() {
        let parse = |budget: &str| {
            let args = ["infera-proxy", "--max-body-bytes", "1000", "--max-body-bytes-in-flight", budget];
            Config::try_from(Args::try_parse_from(args).unwrap())
        };
        assert!(matches!(parse("999"), Err(ConfigError::BodyBudget { budget: 999, body: 1000 })));
        assert_eq!(parse("1000").unwrap().max_body_bytes_in_flight, 1000);
    }

    #[test]
    fn control_urls_are_all_plain_or_all_tls_and_the_token_file_is_read_at_start() {
        let a = Args::try_parse_from(["infera-proxy", "--control", "https://a:1,http://b:2"]).unwrap();
        let e = Config::try_from(a).unwrap_err();
        assert!(matches!(e, ConfigError::MixedControlSchemes), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "0123456789abcdef\n").unwrap();
        let argv = ["infera-proxy", "--control-token-file", token.to_str().unwrap()];
        assert!(Config::try_from(Args::try_parse_from(argv).unwrap()).unwrap().control_token.is_some());
        let a = Args::try_parse_from(["infera-proxy", "--control-token-file", "/nonexistent/token"]).unwrap();
        let e = Config::try_from(a).unwrap_err();
        assert!(e.to_string().contains("--control-token-file /nonexistent/token"), "{e}");
    }
}

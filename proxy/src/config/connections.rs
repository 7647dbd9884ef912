//! What a client connection may cost the proxy: the flags of the listener's limits
//! ([`infera_runtime::serve::ConnLimits`]), the request body's deadline, and where `/metrics` is
//! served.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args as ClapArgs;
use infera_runtime::serve::ConnLimits;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Connections")]
pub(super) struct ConnectionArgs {
    /// A new connection's TLS handshake and first bytes, and every HTTP/1 request head, must
    /// arrive within this (a slow or silent client is closed then). It is also how long an idle
    /// HTTP/1 keep-alive connection is kept.
    #[arg(long, env = "INFERA_PROXY_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    header_read_timeout_ms: u64,
    /// A request's whole body must arrive within this once its head has (408 otherwise).
    #[arg(long, env = "INFERA_PROXY_BODY_READ_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    body_read_timeout_ms: u64,
    /// Most client connections open at once; one past it is closed as soon as it is accepted
    /// (`infera_proxy_connections_refused_total`). Keep the process's file-descriptor limit
    /// above it plus the connections to workers.
    #[arg(long, env = "INFERA_PROXY_MAX_CONNECTIONS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// HTTP/2: concurrent streams on one client connection.
    #[arg(long, env = "INFERA_PROXY_H2_MAX_CONCURRENT_STREAMS", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    h2_max_concurrent_streams: u32,
    /// A request head's size: HTTP/1 headers, HTTP/2's header list (bytes).
    #[arg(long, env = "INFERA_PROXY_MAX_HEADER_BYTES", default_value_t = 64 << 10,
          value_parser = clap::value_parser!(u32).range(8_192..=1_048_576))]
    max_header_bytes: u32,
    /// Serve `/metrics` on this address instead of the API's (where it then answers 404): the
    /// metrics name API keys and show traffic, so keep them off a public port. Port 0 picks one.
    #[arg(long, env = "INFERA_PROXY_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

/// The listener's limits, as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connections {
    /// Every client connection's limits.
    pub limits: ConnLimits,
    /// A request body's deadline, from its head.
    pub body_read_timeout: Duration,
    /// `/metrics` on an address of its own (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
}

impl From<ConnectionArgs> for Connections {
    fn from(a: ConnectionArgs) -> Self {
        Self {
            limits: ConnLimits {
                header_read: Duration::from_millis(a.header_read_timeout_ms),
                max_connections: usize::try_from(a.max_connections).unwrap_or(usize::MAX),
                h2_max_concurrent_streams: a.h2_max_concurrent_streams,
                max_header_bytes: a.max_header_bytes,
                ..ConnLimits::DEFAULT
            },
            body_read_timeout: Duration::from_millis(a.body_read_timeout_ms),
            metrics_listen: a.metrics_listen,
        }
    }
}

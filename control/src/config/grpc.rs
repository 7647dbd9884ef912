//! What a connection to control's gRPC sockets may cost: how many may be open, how soon a new
//! one must speak, HTTP/2 streams per connection and in flight per connection, and the largest
//! message control decodes (`--listen` and `--admin-listen` alike).

use std::time::Duration;

use clap::Args as ClapArgs;
use infera_runtime::serve::ConnLimits;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "gRPC limits")]
pub(super) struct GrpcLimitArgs {
    /// Most connections open on each gRPC socket; one past it is closed as soon as it is
    /// accepted. Proxies hold one each (two with an HA replica set), operators' tools one a call.
    #[arg(long, env = "INFERA_CONTROL_GRPC_MAX_CONNECTIONS", default_value_t = 1_024,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    grpc_max_connections: u64,
    /// A new connection's TLS handshake and first bytes must arrive within this (a silent
    /// connection is closed then).
    #[arg(long, env = "INFERA_CONTROL_GRPC_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    grpc_header_read_timeout_ms: u64,
    /// HTTP/2 streams (calls) open at once on one connection; calls past it wait.
    #[arg(long, env = "INFERA_CONTROL_GRPC_MAX_CONCURRENT_STREAMS", default_value_t = 1_024,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    grpc_max_concurrent_streams: u32,
    /// The largest message control decodes (a PickMany of 1,024 picks with page hashes, a
    /// proxy's Redeclare); a larger one is refused with RESOURCE_EXHAUSTED.
    #[arg(long, env = "INFERA_CONTROL_GRPC_MAX_MESSAGE_BYTES", default_value_t = 16 << 20,
          value_parser = clap::value_parser!(u64).range(65_536..=1 << 30))]
    grpc_max_message_bytes: u64,
}

/// Control's gRPC limits, as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpcLimits {
    /// Every connection's limits (the connection cap and header deadline; HTTP/2 streams).
    pub conn: ConnLimits,
    /// The largest message decoded.
    pub max_message_bytes: usize,
}

impl From<GrpcLimitArgs> for GrpcLimits {
    fn from(a: GrpcLimitArgs) -> Self {
        Self {
            conn: ConnLimits {
                header_read: Duration::from_millis(a.grpc_header_read_timeout_ms),
                max_connections: usize::try_from(a.grpc_max_connections).unwrap_or(usize::MAX),
                h2_max_concurrent_streams: a.grpc_max_concurrent_streams,
                ..ConnLimits::DEFAULT
            },
            max_message_bytes: usize::try_from(a.grpc_max_message_bytes).unwrap_or(usize::MAX),
        }
    }
}

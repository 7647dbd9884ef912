//! The runtime every infera binary shares, beside the contract in `infera-proto`:
//!
//! - [`serve`]: the HTTP accept loop and shutdown signal every server shares, the connections
//!   of a tonic server held to the same limits, TLS on listeners and on the channels to control,
//!   and the HTTP client to workers (`http://` or `https://`).
//! - [`telemetry`]: the tracing/OTLP set-up all binaries share, W3C trace-context propagation
//!   across HTTP and gRPC, and the binaries' shared `main`.
//! - [`cli`]: the command-line conventions every binary's tests check.

pub mod cli;
pub mod serve;
pub mod telemetry;

//! infera's wire contract and shared domain types.
//!
//! - [`pb`]: the generated gRPC code for `infera.control.v1` (router + admin services).
//! - [`types`]: the domain types every part shares: ids, roles, targets, modes, worker records.
//! - [`convert`]: the one place where wire messages become domain values (and back); values are
//!   checked here, so nothing past this boundary sees an unknown enum or an empty id.
//! - [`error`]: control's error reasons, carried on every error status as a typed
//!   `google.rpc.ErrorInfo` detail; control builds statuses from them, callers decode them.
//!
//! Feature `cli` derives `clap::ValueEnum` on the closed choices, for binaries that take them as
//! flags. The runtime the binaries share (serve loop, TLS, telemetry, command-line conventions)
//! is `infera-runtime`.

pub mod convert;
pub mod error;
pub mod types;

/// Generated code for package `infera.control.v1`.
#[allow(missing_docs, unreachable_pub, missing_debug_implementations, clippy::all)]
pub mod pb {
    tonic::include_proto!("infera.control.v1");
}

/// Encoded file descriptor set of `infera.control.v1`, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("infera_control_v1");

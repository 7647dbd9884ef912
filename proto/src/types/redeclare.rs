//! A leg a proxy re-declares to a control that does not hold it (after a restart or a failover,
//! or a local fallback pick): what the new booking needs.

use std::time::Duration;

use super::{ModelName, PickKind, RequestId, ReservationId, Target};

/// The most legs one `Redeclare` carries (a proxy with more sends several calls).
pub const MAX_DECLARED_LEGS: usize = 1 << 16;

/// The most bytes of encoded legs a proxy puts in one `Redeclare`: well under control's
/// smallest `--max-redeclare-bytes` and tonic's 4 MiB message limit, so a proxy with many legs
/// in flight sends them in several calls that each fit.
pub const REDECLARE_CHUNK_BYTES: usize = 256 << 10;

/// One leg in flight on a proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredLeg {
    /// Prefill or decode.
    pub kind: PickKind,
    /// Where it runs.
    pub target: Target,
    /// The model it asked for.
    pub model: ModelName,
    /// Its request id (both legs of a request carry the same).
    pub request_id: RequestId,
    /// The tokens its booking charges, at most [`super::MAX_REQUEST_TOKENS`].
    pub input_tokens: u64,
    /// How long it has been in flight.
    pub age: Duration,
    /// What an earlier control booked it as; `None` for a local fallback pick.
    pub previous: Option<ReservationId>,
}

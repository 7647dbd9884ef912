//! How a reservation ends: why ([`ReleaseReason`]), how a failed leg failed ([`LegFailure`]),
//! and the [`Release`] that carries both for one reservation — from the proxy's outbox over the
//! wire to control's ledger, one value end to end.

use super::ids::ReservationId;

/// One reservation's end: which, why and, for a failed leg, how it failed (outlier ejection
/// counts that against the leg's target). A failure kind only comes with
/// [`ReleaseReason::Failed`]; on the wire, `convert::release_request` checks that, and
/// `pb::ReleaseRequest::from` writes it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Release {
    /// The reservation that ends.
    pub id: ReservationId,
    /// Why it ends.
    pub reason: ReleaseReason,
    /// How its leg failed (only with [`ReleaseReason::Failed`]; `None` when the cause is not
    /// known).
    pub failure: Option<LegFailure>,
}

impl Release {
    /// `id` ends for `reason`, with no failure kind.
    pub fn new(id: ReservationId, reason: ReleaseReason) -> Self {
        Self { id, reason, failure: None }
    }
}

/// Why a reservation ended.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReleaseReason {
    /// The response (or the prefill leg) reached its end.
    Eof,
    /// The client went away.
    Cancelled,
    /// An upstream leg failed.
    Failed,
    /// The holder's lease expired (control only).
    LeaseExpired,
    /// The target left the deployment.
    TargetRemoved,
}

impl ReleaseReason {
    /// Every reason (control pre-registers a metric series for each).
    pub const ALL: [Self; 5] =
        [Self::Eof, Self::Cancelled, Self::Failed, Self::LeaseExpired, Self::TargetRemoved];

    /// A metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Eof => "eof",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::LeaseExpired => "lease_expired",
            Self::TargetRemoved => "target_removed",
        }
    }
}

/// How a failed leg failed, as the proxy saw it: outlier ejection counts these against the
/// leg's target.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum LegFailure {
    /// The connection was refused or not accepted.
    Connect,
    /// No answer in time.
    Timeout,
    /// A 5xx answer.
    ServerError,
    /// The connection or stream broke after it was accepted.
    StreamCut,
}

impl LegFailure {
    /// Every kind.
    pub const ALL: [Self; 4] = [Self::Connect, Self::Timeout, Self::ServerError, Self::StreamCut];

    /// A metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::ServerError => "server_error",
            Self::StreamCut => "stream_cut",
        }
    }
}

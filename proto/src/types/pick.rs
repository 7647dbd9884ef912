//! A pick as control sees it, after the wire boundary checked it.

use super::{LeaseId, ModelName, RequestId, SessionKey};

/// The largest input-token count a pick accepts (2^28, about 268 M): far beyond any model's
/// context, small enough that no sum in the ledger can overflow or lose precision.
pub const MAX_REQUEST_TOKENS: u64 = 1 << 28;

/// One request asking for a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickRequest {
    /// The proxy's lease; the reservation belongs to it.
    pub lease: LeaseId,
    /// Carried across both legs; empty ids are replaced by the proxy before the pick.
    pub request_id: RequestId,
    /// Picks are per model.
    pub model: ModelName,
    /// Input tokens, at most [`MAX_REQUEST_TOKENS`].
    pub input_tokens: u64,
    /// Multi-turn session key, for prefill affinity.
    pub session: Option<SessionKey>,
}

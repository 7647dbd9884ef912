//! The routing settings in force. Operators change W and the mode at run time; every change
//! is validated as a whole, so a rejected change leaves the old settings in place.

use std::time::Duration;

pub use infera_proto::types::OverlapCredit;
use infera_proto::types::{DecodeInputDemand, DecodePolicy, PrefillPolicy, RequestWeight, WeightNeedsDemand};

/// The routing settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Decode selection mode.
    pub mode: DecodeInputDemand,
    /// W, tokens per held request.
    pub weight: RequestWeight,
    /// The legacy decode policy.
    pub policy: DecodePolicy,
    /// How prefill targets are chosen.
    pub prefill_policy: PrefillPolicy,
    /// Prefill cost credit per cached prompt token (1 = the tokens this pick does not compute).
    pub overlap_credit: OverlapCredit,
    /// How much more a session's prefill target may cost than the cheapest and still keep it.
    pub session_slack_tokens: u64,
    /// Idle time after which a session forgets its prefill target.
    pub session_ttl: Duration,
    /// Lease TTL when the proxy asks for none.
    pub lease_ttl: Duration,
}

impl Settings {
    /// Shortest and longest lease TTL a proxy may ask for.
    pub const LEASE_TTL_RANGE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(300));

    /// W > 0 needs a mode that scores.
    pub fn validate(&self) -> Result<(), WeightNeedsDemand> {
        WeightNeedsDemand::check(self.weight, self.mode)
    }
}

//! The routing settings in force. Operators change W and the mode at run time; every change
//! is validated as a whole, so a rejected change leaves the old settings in place.

use std::time::Duration;

use infera_proto::types::{DecodeInputDemand, DecodePolicy, PrefillPolicy, RequestWeight};

use crate::error::ControlError;

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
    pub fn validate(&self) -> Result<(), ControlError> {
        if !self.weight.is_zero() && !self.mode.scores() {
            return Err(ControlError::WeightNeedsDemand { weight: self.weight, mode: self.mode });
        }
        Ok(())
    }
}

/// Prefill cost credit per prompt token a target already holds in its KV cache:
/// `cost = booked + request − credit × cached`. 1 counts exactly the tokens the pick would not
/// compute; above 1, a cache hit outweighs that much queued work elsewhere (the tokens not
/// recomputed free the whole pool, and the target keeps the longer prefix for the next turn).
/// Finite, from 0 (load only) to [`OverlapCredit::MAX`].
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug)]
pub struct OverlapCredit(f64);

impl OverlapCredit {
    /// The largest accepted credit.
    pub const MAX: f64 = 100.0;

    /// Checks a credit.
    pub fn new(c: f64) -> Result<Self, String> {
        if c.is_finite() && (0.0..=Self::MAX).contains(&c) {
            Ok(Self(c + 0.0))
        } else {
            Err(format!("the prefill overlap credit must be a number from 0 to {}, got {c}", Self::MAX))
        }
    }

    /// The credit per cached token.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl std::str::FromStr for OverlapCredit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let c: f64 = s.trim().parse().map_err(|_| format!("not a number: {s:?}"))?;
        Self::new(c)
    }
}

impl std::fmt::Display for OverlapCredit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

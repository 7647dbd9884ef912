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
    /// Most sessions remembered; at the cap the one used least recently is forgotten.
    pub session_max: usize,
    /// Lease TTL when the proxy asks for none.
    pub lease_ttl: Duration,
    /// How much a held decode request still in prefill counts, relative to one already past
    /// its prefill (1: alike, the cost as it always was).
    pub prefilling_weight: PrefillingWeight,
    /// Whether a prefilling request counts less the longer it has been prefilling, past its
    /// model's median prefill phase (`crate::prefill_phase`).
    pub prefilling_age_decay: AgeDecay,
}

/// `--decode-prefilling-age-decay`: whether a held decode request still in prefill counts
/// `min(1, median phase / its age)` of a request (on) or a whole one (off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AgeDecay {
    /// Every prefilling request counts whole: the cost as without the decay.
    Off,
    /// Prefilling requests older than their model's median prefill phase count less (the
    /// default: measured in `bench/results/2026-12-05-decode-study-history.md`, "Age decay,
    /// measured").
    #[default]
    On,
}

impl AgeDecay {
    /// Whether the decay applies.
    pub fn is_on(self) -> bool {
        self == Self::On
    }

    /// The flag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
        }
    }
}

/// The weight of a decode target's held requests (and their tokens) that are still in
/// prefill, relative to those past it: 0 counts only what decodes (or is about to), 1 counts
/// them alike, above 1 counts what is yet to come more (it will still be decoding when a
/// request picked now arrives, while some of today's decodes will have finished).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct PrefillingWeight(f64);

/// A prefilling weight outside its domain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the decode prefilling weight must be a finite number from 0 to {max}, got {0:?}", max = PrefillingWeight::MAX)]
pub struct PrefillingWeightError(String);

impl PrefillingWeight {
    /// The largest accepted weight.
    pub const MAX: f64 = 4.0;
    /// Prefilling requests count as much as any other: the cost without phases.
    pub const ALIKE: Self = Self(1.0);

    /// Checks a weight.
    pub fn new(w: f64) -> Result<Self, PrefillingWeightError> {
        if w.is_finite() && (0.0..=Self::MAX).contains(&w) {
            Ok(Self(w + 0.0))
        } else {
            Err(PrefillingWeightError(w.to_string()))
        }
    }

    /// The weight.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for PrefillingWeight {
    fn default() -> Self {
        Self::ALIKE
    }
}

impl std::str::FromStr for PrefillingWeight {
    type Err = PrefillingWeightError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let w: f64 = s.trim().parse().map_err(|_| PrefillingWeightError(s.to_owned()))?;
        Self::new(w)
    }
}

impl std::fmt::Display for PrefillingWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Settings {
    /// Shortest and longest lease TTL a proxy may ask for.
    pub const LEASE_TTL_RANGE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(300));

    /// W > 0 needs a mode that scores.
    pub fn validate(&self) -> Result<(), WeightNeedsDemand> {
        WeightNeedsDemand::check(self.weight, self.mode)
    }
}

//! Closed sets of routing choices, and the validated request weight.

use std::fmt;

/// How decode targets are selected (`--decode-input-demand`). The ledger books in every mode,
/// so a switch at run time starts warm; the mode only decides selection.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum DecodeInputDemand {
    /// The legacy policy selects.
    #[default]
    Off,
    /// The legacy policy selects; the cost suggestion is computed and recorded.
    Shadow,
    /// The lowest cost wins.
    On,
}

impl DecodeInputDemand {
    /// Whether the cost (and so a request weight) takes part in this mode at all.
    pub fn scores(self) -> bool {
        !matches!(self, Self::Off)
    }

    /// The flag spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Shadow => "shadow",
            Self::On => "on",
        }
    }
}

impl fmt::Display for DecodeInputDemand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How prefill targets are selected (`--prefill-policy`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum PrefillPolicy {
    /// Load minus KV overlap (when the pick carries page hashes), with session affinity.
    #[default]
    CacheAware,
    /// Each model's prefill targets in turn (the baseline KV-aware routing is measured against).
    RoundRobin,
}

impl PrefillPolicy {
    /// The flag spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CacheAware => "cache-aware",
            Self::RoundRobin => "round-robin",
        }
    }
}

/// The legacy decode policy (`--decode-policy`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum DecodePolicy {
    /// Each model's decode targets in turn.
    #[default]
    RoundRobin,
    /// Uniformly at random.
    Random,
    /// Two distinct targets at random; the one holding fewer requests (then fewer tokens) wins.
    PowerOfTwo,
    /// The target whose engine reports the fewest requests (running and queued, its
    /// `/v1/loads` as last read, every `--engine-poll-ms`); ties at random. The ledger is not
    /// read: the stateless policy of a router that polls the engines fast.
    LeastRunning,
}

impl DecodePolicy {
    /// The flag spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::Random => "random",
            Self::PowerOfTwo => "power-of-two",
            Self::LeastRunning => "least-running",
        }
    }
}

impl fmt::Display for DecodePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which pick a reservation belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum PickKind {
    /// The prefill leg; released when that leg finishes.
    Prefill,
    /// The decode leg (or the only leg of an aggregated request).
    Decode,
}

impl PickKind {
    /// A metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }
}

/// Tokens charged per held request in the decode cost (W). Finite, non-negative and at most
/// [`RequestWeight::MAX`].
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug, Default)]
pub struct RequestWeight(f64);

/// A weight outside its domain.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum WeightError {
    /// NaN or infinite.
    #[error("decode request weight must be a finite number, got {0}")]
    NotFinite(f64),
    /// Below zero.
    #[error("decode request weight must not be negative, got {0}")]
    Negative(f64),
    /// Above the maximum.
    #[error("decode request weight {0} exceeds the maximum {max}", max = RequestWeight::MAX)]
    TooLarge(f64),
}

impl RequestWeight {
    /// Zero: token-only demand.
    pub const ZERO: Self = Self(0.0);
    /// The largest accepted weight (1e12 tokens per request): far above any useful value,
    /// low enough that costs stay exact integers in an f64.
    pub const MAX: f64 = 1e12;

    /// Checks a weight.
    pub fn new(w: f64) -> Result<Self, WeightError> {
        if !w.is_finite() {
            Err(WeightError::NotFinite(w))
        } else if w < 0.0 {
            Err(WeightError::Negative(w))
        } else if w > Self::MAX {
            Err(WeightError::TooLarge(w))
        } else {
            // Normalise -0.0 so that "is zero" has one meaning.
            Ok(Self(w + 0.0))
        }
    }

    /// The weight in tokens per held request.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Whether the held-request term takes part.
    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }
}

impl fmt::Display for RequestWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for RequestWeight {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let w: f64 = s.trim().parse().map_err(|e| format!("not a number: {e}"))?;
        Self::new(w).map_err(|e| e.to_string())
    }
}

/// A decode request weight above 0 while the demand mode does not score: W only takes part in the
/// demand cost, so the pair is refused wherever it is set (control's flags and Admin calls, the
/// launcher's deploy file). Each of those says it in its own terms; the message here is the one
/// of an Admin call.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "decode request weight {weight} needs --decode-input-demand shadow or on (it is {mode}); \
     set the mode first, or set the weight to 0 before turning the mode off"
)]
pub struct WeightNeedsDemand {
    /// The weight that would be in force.
    pub weight: RequestWeight,
    /// The mode that would be in force.
    pub mode: DecodeInputDemand,
}

impl WeightNeedsDemand {
    /// Whether `weight` may be in force together with `mode`.
    pub fn check(weight: RequestWeight, mode: DecodeInputDemand) -> Result<(), Self> {
        if weight.is_zero() || mode.scores() { Ok(()) } else { Err(Self { weight, mode }) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_outside_the_domain_are_rejected() {
        assert!(matches!(RequestWeight::new(f64::NAN), Err(WeightError::NotFinite(_))));
        assert!(matches!(RequestWeight::new(f64::INFINITY), Err(WeightError::NotFinite(_))));
        assert!(matches!(RequestWeight::new(-1.0), Err(WeightError::Negative(_))));
        assert!(matches!(RequestWeight::new(1e13), Err(WeightError::TooLarge(_))));
        assert_eq!(RequestWeight::new(1e6).unwrap().get(), 1e6);
        assert!(RequestWeight::new(-0.0).unwrap().is_zero());
        assert_eq!("1000000".parse::<RequestWeight>().unwrap().get(), 1e6);
        assert!("abc".parse::<RequestWeight>().is_err());
    }

    #[test]
    fn a_weight_needs_a_scoring_mode() {
        let w = RequestWeight::new(1e6).unwrap();
        assert_eq!(
            WeightNeedsDemand::check(w, DecodeInputDemand::Off),
            Err(WeightNeedsDemand { weight: w, mode: DecodeInputDemand::Off })
        );
        assert_eq!(WeightNeedsDemand::check(w, DecodeInputDemand::Shadow), Ok(()));
        assert_eq!(WeightNeedsDemand::check(RequestWeight::ZERO, DecodeInputDemand::Off), Ok(()));
    }
}

/// Prefill cost credit per prompt token a target already holds in its KV cache:
/// `cost = booked + request − credit × cached`. 1 counts exactly the tokens the pick would not
/// compute; above 1, a cache hit outweighs that much more queued work at its holder (the tokens
/// not recomputed free the whole pool, and the holder keeps the prefix whole for the next turn).
/// Finite, from 0 (load only) to [`OverlapCredit::MAX`].
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug)]
pub struct OverlapCredit(f64);

/// A credit outside its domain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CreditError {
    /// Not a number at all.
    #[error("the prefill overlap credit must be a number, got {0:?}")]
    NotANumber(String),
    /// NaN, infinite, negative or above the maximum.
    #[error("the prefill overlap credit must be a finite number from 0 to {max}, got {0}", max = OverlapCredit::MAX)]
    OutOfRange(f64),
}

impl OverlapCredit {
    /// The largest accepted credit.
    pub const MAX: f64 = 100.0;

    /// Checks a credit.
    pub fn new(c: f64) -> Result<Self, CreditError> {
        if c.is_finite() && (0.0..=Self::MAX).contains(&c) {
            // Normalise -0.0.
            Ok(Self(c + 0.0))
        } else {
            Err(CreditError::OutOfRange(c))
        }
    }

    /// The credit per cached token.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl std::str::FromStr for OverlapCredit {
    type Err = CreditError;

    fn from_str(s: &str) -> Result<Self, CreditError> {
        let c: f64 = s.trim().parse().map_err(|_| CreditError::NotANumber(s.to_owned()))?;
        Self::new(c)
    }
}

impl fmt::Display for OverlapCredit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

//! What a comparison tolerates and checks beyond shape: intended differences (a path pattern,
//! optionally one kind of difference, and the reason) and numeric ranges.

use super::path::{JsonPath, PathPattern, PatternError};
use super::{DiffKind, Difference};

/// An intended difference, as a const table states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intended {
    /// The paths it covers ([`PathPattern`] syntax).
    pub path: &'static str,
    /// The one kind of difference tolerated there; `None`: any.
    pub kind: Option<DiffKind>,
    /// Why the difference is intended.
    pub reason: &'static str,
}

impl Intended {
    /// Any difference at `path`, for `reason`.
    pub const fn any(path: &'static str, reason: &'static str) -> Self {
        Self { path, kind: None, reason }
    }

    /// Only differences of `kind` at `path`, for `reason`.
    pub const fn only(path: &'static str, kind: DiffKind, reason: &'static str) -> Self {
        Self { path, kind: Some(kind), reason }
    }
}

#[derive(Debug, Clone)]
struct Allowance {
    pattern: PathPattern,
    kind: Option<DiffKind>,
    reason: String,
}

/// Intended differences, parsed.
#[derive(Debug, Clone, Default)]
pub struct AllowList {
    entries: Vec<Allowance>,
}

impl AllowList {
    /// Nothing is tolerated.
    pub fn none() -> Self {
        Self::default()
    }

    /// The list of `intended`.
    ///
    /// # Errors
    /// When a path pattern does not parse.
    pub fn new(intended: &[Intended]) -> Result<Self, PatternError> {
        let mut list = Self::default();
        for i in intended {
            list = list.with(i.path, i.kind, i.reason)?;
        }
        Ok(list)
    }

    /// This list and one more entry.
    ///
    /// # Errors
    /// When `path` does not parse.
    pub fn with(mut self, path: &str, kind: Option<DiffKind>, reason: &str) -> Result<Self, PatternError> {
        self.entries.push(Allowance { pattern: PathPattern::parse(path)?, kind, reason: reason.to_owned() });
        Ok(self)
    }

    /// The reason `d` is intended, if it is.
    pub fn reason(&self, d: &Difference) -> Option<&str> {
        self.entries
            .iter()
            .find(|a| a.kind.is_none_or(|k| k == d.kind()) && a.pattern.matches(d.path()))
            .map(|a| a.reason.as_str())
    }
}

/// A numeric range the values at some paths must lie in, on both sides (e.g. `token_usage` in
/// [0, 1]).
#[derive(Debug, Clone)]
pub struct RangeRule {
    pattern: PathPattern,
    /// Smallest value allowed.
    pub min: f64,
    /// Largest value allowed.
    pub max: f64,
}

impl RangeRule {
    /// Values at `path` must lie in [`min`, `max`].
    ///
    /// # Errors
    /// When `path` does not parse.
    pub fn new(path: &str, min: f64, max: f64) -> Result<Self, PatternError> {
        Ok(Self { pattern: PathPattern::parse(path)?, min, max })
    }

    /// Whether the rule covers `path`.
    pub fn covers(&self, path: &JsonPath) -> bool {
        self.pattern.matches(path)
    }

    /// Whether `value` is in range.
    pub fn holds(&self, value: f64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// The pattern as written.
    pub fn path(&self) -> &str {
        self.pattern.as_str()
    }
}

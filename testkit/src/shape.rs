//! Compares two JSON values by shape — member names, JSON types, presence, array lengths and,
//! where asked, numeric ranges and member order — and reports every difference with its path.
//! Values themselves (text, ids, timings) are not compared. An [`AllowList`] states the
//! intended differences (path pattern → reason); they are reported apart and do not fail a
//! comparison. Pure: no I/O.
//!
//! ```
//! use infera_testkit::shape::{compare, DiffKind, Intended, Spec};
//! use serde_json::json;
//!
//! let real = json!({"loads": [{"token_usage": 0.2, "decode_moments": [1.0]}]});
//! let sim = json!({"loads": [{"token_usage": 0.5, "decode_moments": null}]});
//! let spec = Spec::new()
//!     .range("$.loads[*].token_usage", 0.0, 1.0)?
//!     .allow(&[Intended::only("$.loads[*].decode_moments", DiffKind::Type, "null before the first batch")])?;
//! let report = compare(&real, &sim, &spec);
//! assert!(report.is_clean(), "{report}");
//! assert_eq!(report.allowed.len(), 1);
//! # Ok::<(), infera_testkit::shape::PatternError>(())
//! ```

mod path;
mod rules;
mod sse;
#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::Value;

pub use path::{JsonPath, PathPattern, PatternError, Step};
pub use rules::{AllowList, Intended, RangeRule};
pub use sse::{collapse_runs, parse_sse, skeleton};

/// A JSON value's type; integers and floats differ (`1` is not `1.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JsonType {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool,
    /// A number without a fraction or exponent.
    Integer,
    /// Any other number.
    Float,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonType {
    /// The type of `value`.
    pub fn of(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(_) => Self::Bool,
            Value::Number(n) if n.is_f64() => Self::Float,
            Value::Number(_) => Self::Integer,
            Value::String(_) => Self::String,
            Value::Array(_) => Self::Array,
            Value::Object(_) => Self::Object,
        }
    }

    /// Its lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Bool => "bool",
            Self::Integer => "integer",
            Self::Float => "float",
            Self::String => "string",
            Self::Array => "array",
            Self::Object => "object",
        }
    }
}

/// The kinds of [`Difference`], for allow-list entries that tolerate only one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiffKind {
    /// In the reference, not in the candidate.
    Missing,
    /// In the candidate, not in the reference.
    Extra,
    /// Of another type.
    Type,
    /// An array of another length.
    Length,
    /// A number outside its range.
    OutOfRange,
    /// An object's members in another order.
    KeyOrder,
}

/// Which value of the two broke a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The first argument of [`compare`] (e.g. real SGLang).
    Reference,
    /// The second (e.g. the sim).
    Candidate,
}

/// One way the candidate's shape differs from the reference's.
#[derive(Debug, Clone, PartialEq)]
pub enum Difference {
    /// A member the candidate lacks.
    Missing {
        /// Where.
        path: JsonPath,
        /// The reference's type there.
        expected: JsonType,
    },
    /// A member only the candidate has.
    Extra {
        /// Where.
        path: JsonPath,
        /// The candidate's type there.
        found: JsonType,
    },
    /// Another type at the same place.
    Type {
        /// Where.
        path: JsonPath,
        /// The reference's type.
        expected: JsonType,
        /// The candidate's type.
        found: JsonType,
    },
    /// Arrays of different lengths (their common prefix is still compared).
    Length {
        /// Where.
        path: JsonPath,
        /// The reference's length.
        expected: usize,
        /// The candidate's length.
        found: usize,
    },
    /// A number outside the range a [`RangeRule`] sets.
    OutOfRange {
        /// Where.
        path: JsonPath,
        /// Whose value.
        side: Side,
        /// The value.
        value: f64,
        /// The range's bounds.
        min: f64,
        /// The range's upper bound.
        max: f64,
    },
    /// The same members in another order (only with [`Spec::key_order`]).
    KeyOrder {
        /// Where.
        path: JsonPath,
        /// The reference's order of the common members.
        expected: Vec<String>,
        /// The candidate's order of them.
        found: Vec<String>,
    },
}

impl Difference {
    /// Where the difference is.
    pub fn path(&self) -> &JsonPath {
        match self {
            Self::Missing { path, .. }
            | Self::Extra { path, .. }
            | Self::Type { path, .. }
            | Self::Length { path, .. }
            | Self::OutOfRange { path, .. }
            | Self::KeyOrder { path, .. } => path,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> DiffKind {
        match self {
            Self::Missing { .. } => DiffKind::Missing,
            Self::Extra { .. } => DiffKind::Extra,
            Self::Type { .. } => DiffKind::Type,
            Self::Length { .. } => DiffKind::Length,
            Self::OutOfRange { .. } => DiffKind::OutOfRange,
            Self::KeyOrder { .. } => DiffKind::KeyOrder,
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { path, expected } => write!(f, "{path}: missing (reference: {})", expected.name()),
            Self::Extra { path, found } => write!(f, "{path}: extra ({})", found.name()),
            Self::Type { path, expected, found } => {
                write!(f, "{path}: {} instead of {}", found.name(), expected.name())
            }
            Self::Length { path, expected, found } => {
                write!(f, "{path}: {found} items instead of {expected}")
            }
            Self::OutOfRange { path, side, value, min, max } => {
                write!(f, "{path}: {side:?} value {value} outside [{min}, {max}]")
            }
            Self::KeyOrder { path, expected, found } => {
                write!(f, "{path}: members in order {found:?} instead of {expected:?}")
            }
        }
    }
}

/// What a comparison checks beyond names, types and presence.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Numeric ranges, checked on both sides.
    pub ranges: Vec<RangeRule>,
    /// Intended differences.
    pub allow: AllowList,
    /// Whether members in another order are a difference.
    pub key_order: bool,
}

impl Spec {
    /// Shape only: no ranges, nothing allowed, member order ignored.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also values at `path` must lie in [`min`, `max`].
    ///
    /// # Errors
    /// When `path` does not parse.
    pub fn range(mut self, path: &str, min: f64, max: f64) -> Result<Self, PatternError> {
        self.ranges.push(RangeRule::new(path, min, max)?);
        Ok(self)
    }

    /// Also tolerates `intended`.
    ///
    /// # Errors
    /// When a path pattern does not parse.
    pub fn allow(mut self, intended: &[Intended]) -> Result<Self, PatternError> {
        for i in intended {
            self.allow = self.allow.with(i.path, i.kind, i.reason)?;
        }
        Ok(self)
    }

    /// Also checks member order.
    pub fn with_key_order(mut self) -> Self {
        self.key_order = true;
        self
    }
}

/// The outcome of [`compare`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Differences no allow-list entry covers.
    pub differences: Vec<Difference>,
    /// Differences an entry covers, with its reason.
    pub allowed: Vec<(Difference, String)>,
}

impl Report {
    /// Whether every difference is intended.
    pub fn is_clean(&self) -> bool {
        self.differences.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.differences {
            writeln!(f, "{d}")?;
        }
        for (d, why) in &self.allowed {
            writeln!(f, "{d} [intended: {why}]")?;
        }
        Ok(())
    }
}

/// Every shape difference of `candidate` from `reference` under `spec`.
pub fn compare(reference: &Value, candidate: &Value, spec: &Spec) -> Report {
    let mut walk = Walk { spec, report: Report::default() };
    walk.value(&JsonPath::root(), reference, candidate);
    walk.report
}

struct Walk<'a> {
    spec: &'a Spec,
    report: Report,
}

impl Walk<'_> {
    fn push(&mut self, d: Difference) {
        match self.spec.allow.reason(&d) {
            Some(why) => self.report.allowed.push((d, why.to_owned())),
            None => self.report.differences.push(d),
        }
    }

    fn value(&mut self, path: &JsonPath, reference: &Value, candidate: &Value) {
        self.ranges(path, reference, candidate);
        let (expected, found) = (JsonType::of(reference), JsonType::of(candidate));
        if expected != found {
            self.push(Difference::Type { path: path.clone(), expected, found });
            return;
        }
        match (reference, candidate) {
            (Value::Object(r), Value::Object(c)) => {
                for (k, rv) in r {
                    match c.get(k) {
                        Some(cv) => self.value(&path.key(k), rv, cv),
                        None => {
                            self.push(Difference::Missing { path: path.key(k), expected: JsonType::of(rv) })
                        }
                    }
                }
                for (k, cv) in c.iter().filter(|(k, _)| !r.contains_key(*k)) {
                    self.push(Difference::Extra { path: path.key(k), found: JsonType::of(cv) });
                }
                let expected: Vec<String> = r.keys().filter(|k| c.contains_key(*k)).cloned().collect();
                let found: Vec<String> = c.keys().filter(|k| r.contains_key(*k)).cloned().collect();
                if self.spec.key_order && expected != found {
                    self.push(Difference::KeyOrder { path: path.clone(), expected, found });
                }
            }
            (Value::Array(r), Value::Array(c)) => {
                if r.len() != c.len() {
                    self.push(Difference::Length { path: path.clone(), expected: r.len(), found: c.len() });
                }
                for (i, (rv, cv)) in r.iter().zip(c).enumerate() {
                    self.value(&path.index(i), rv, cv);
                }
            }
            _ => {}
        }
    }

    fn ranges(&mut self, path: &JsonPath, reference: &Value, candidate: &Value) {
        let spec = self.spec;
        for rule in spec.ranges.iter().filter(|r| r.covers(path)) {
            for (side, v) in [(Side::Reference, reference), (Side::Candidate, candidate)] {
                if let Some(value) = v.as_f64().filter(|x| !rule.holds(*x)) {
                    let d = Difference::OutOfRange {
                        path: path.clone(),
                        side,
                        value,
                        min: rule.min,
                        max: rule.max,
                    };
                    self.push(d);
                }
            }
        }
    }
}

//! The SGLang version a deployment claims, and the command-line differences between the
//! versions the launcher supports. The flags are SGLang's: SGLang 0.5.23
//! `python/sglang/srt/server_args.py` (`ServerArgs.add_cli_args`) over the fields of
//! `python/sglang/srt/arg_groups/fields/*.py` (the same layout since 0.5.21); SGLang 0.5.18
//! `python/sglang/srt/server_args.py` alone.

use std::fmt;
use std::str::FromStr;

/// An SGLang release, `MAJOR.MINOR.PATCH` (a `.postN` suffix is accepted and ignored: post
/// releases do not change the command line).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct SglangVersion {
    major: u32,
    minor: u32,
    patch: u32,
}

/// A version string that is not `X.Y.Z`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an SGLang version (expected MAJOR.MINOR.PATCH, e.g. 0.5.22)")]
pub struct VersionError(String);

impl SglangVersion {
    /// The oldest version whose argparse the launcher's argv is checked against.
    pub const OLDEST: Self = Self::new(0, 5, 18);
    /// The newest version whose argparse the launcher's argv is checked against.
    pub const NEWEST: Self = Self::new(0, 5, 23);

    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self { major, minor, patch }
    }

    /// Whether the conformance suite covers this version.
    pub fn is_supported(self) -> bool {
        (Self::OLDEST..=Self::NEWEST).contains(&self)
    }

    /// 0.5.20 split `--cuda-graph-max-bs` into `-decode` / `-prefill` and dropped the exact old
    /// flag; from 0.5.21 argparse rejects the old spelling as an ambiguous prefix.
    pub fn has_exact_cuda_graph_max_bs(self) -> bool {
        self < Self::new(0, 5, 20)
    }

    /// 0.5.22 added `--attn-dp-size` and deprecated `--enable-dp-attention`; `--dp-size` now
    /// counts whole replicas.
    pub fn has_attn_dp_size(self) -> bool {
        self >= Self::new(0, 5, 22)
    }

    /// `--load-publish-endpoint`, the per-rank load PUB socket: present in 0.5.23
    /// (`python/sglang/srt/arg_groups/fields/observability.py`), absent in 0.5.18; 0.5.19 – 0.5.22
    /// are not verified, so they count as absent.
    pub fn has_load_publish_endpoint(self) -> bool {
        self >= Self::new(0, 5, 23)
    }

    /// `--schedule-policy shortest-prefill-first` and `hrrn` (present in 0.5.21, absent in
    /// 0.5.18; 0.5.19 and 0.5.20 are not verified, so they count as absent).
    pub fn has_prefill_length_policies(self) -> bool {
        self >= Self::new(0, 5, 21)
    }
}

impl FromStr for SglangVersion {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, VersionError> {
        let bad = || VersionError(s.to_owned());
        let core = match s.split_once(".post") {
            Some((core, post)) if !post.is_empty() && post.bytes().all(|b| b.is_ascii_digit()) => core,
            Some(_) => return Err(bad()),
            None => s,
        };
        let mut parts = core.split('.').map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                Err(bad())
            } else {
                p.parse().map_err(|_| bad())
            }
        });
        let (Some(major), Some(minor), Some(patch), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Self::new(major?, minor?, patch?))
    }
}

impl fmt::Display for SglangVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        let v: SglangVersion = "0.5.22".parse().unwrap();
        assert_eq!(v, SglangVersion::new(0, 5, 22));
        assert_eq!("0.5.18.post1".parse::<SglangVersion>().unwrap(), SglangVersion::new(0, 5, 18));
        assert!(SglangVersion::new(0, 5, 9) < SglangVersion::new(0, 5, 18));
        for bad in ["0.5", "0.5.x", "0.5.22.1", "v0.5.22", "0.5.22.post", ""] {
            assert!(bad.parse::<SglangVersion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn flag_spellings_follow_the_version() {
        let v18 = SglangVersion::new(0, 5, 18);
        let v20 = SglangVersion::new(0, 5, 20);
        let v22 = SglangVersion::new(0, 5, 22);
        assert!(v18.has_exact_cuda_graph_max_bs() && !v20.has_exact_cuda_graph_max_bs());
        assert!(!SglangVersion::new(0, 5, 21).has_attn_dp_size() && v22.has_attn_dp_size());
        assert!(v18.is_supported() && SglangVersion::NEWEST.is_supported());
        assert!(!v18.has_load_publish_endpoint() && SglangVersion::new(0, 5, 23).has_load_publish_endpoint());
        assert!(!SglangVersion::new(0, 5, 24).is_supported());
    }
}

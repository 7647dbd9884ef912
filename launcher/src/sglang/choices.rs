//! The closed value sets of SGLang flags, spelled as the flags take them.

use serde::Deserialize;

use crate::version::SglangVersion;

/// `--disaggregation-transfer-backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferBackend {
    /// Mooncake over RDMA.
    Mooncake,
    /// Mooncake over TCP.
    MooncakeTcp,
    /// NIXL.
    Nixl,
    /// MORI.
    Mori,
    /// Ascend.
    Ascend,
    /// No transfer (testing).
    Fake,
}

impl TransferBackend {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::MooncakeTcp => "mooncake_tcp",
            Self::Nixl => "nixl",
            Self::Mori => "mori",
            Self::Ascend => "ascend",
            Self::Fake => "fake",
        }
    }
}

/// `--schedule-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulePolicy {
    /// First come, first served.
    Fcfs,
    /// Longest prefix match.
    Lpm,
    /// Random.
    Random,
    /// Depth-first weighting.
    DfsWeight,
    /// Longest output first.
    Lof,
    /// Request priority.
    Priority,
    /// Highest response ratio next (0.5.21+).
    Hrrn,
    /// Shortest prefill first (0.5.21+).
    ShortestPrefillFirst,
}

impl SchedulePolicy {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fcfs => "fcfs",
            Self::Lpm => "lpm",
            Self::Random => "random",
            Self::DfsWeight => "dfs-weight",
            Self::Lof => "lof",
            Self::Priority => "priority",
            Self::Hrrn => "hrrn",
            Self::ShortestPrefillFirst => "shortest-prefill-first",
        }
    }

    /// Whether the version's argparse lists this choice.
    pub fn exists_in(self, version: SglangVersion) -> bool {
        !matches!(self, Self::Hrrn | Self::ShortestPrefillFirst) || version.has_prefill_length_policies()
    }
}

/// `--hicache-write-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HiCacheWritePolicy {
    /// Write to host when evicted from the device.
    WriteBack,
    /// Write to host at once.
    WriteThrough,
    /// Write through for hot pages only.
    WriteThroughSelective,
}

impl HiCacheWritePolicy {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WriteBack => "write_back",
            Self::WriteThrough => "write_through",
            Self::WriteThroughSelective => "write_through_selective",
        }
    }
}

/// `--speculative-algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum SpeculativeAlgorithm {
    /// EAGLE (also the MTP path for models with NextN layers).
    #[serde(rename = "EAGLE")]
    Eagle,
    /// EAGLE-3.
    #[serde(rename = "EAGLE3")]
    Eagle3,
    /// NextN (MTP; SGLang treats it as EAGLE).
    #[serde(rename = "NEXTN")]
    NextN,
}

impl SpeculativeAlgorithm {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Eagle => "EAGLE",
            Self::Eagle3 => "EAGLE3",
            Self::NextN => "NEXTN",
        }
    }
}

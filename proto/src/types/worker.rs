//! Worker records: what a registry (the static workers file now, etcd later) says about a worker.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{DpRank, ModelName, Target, WorkerId};

/// What a worker does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A PD prefill worker.
    Prefill,
    /// A PD decode worker.
    Decode,
    /// An aggregated worker (`--disaggregation-mode null`).
    Mixed,
}

impl Role {
    /// The spelling in files, flags and labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prefill => "prefill",
            Self::Decode => "decode",
            Self::Mixed => "mixed",
        }
    }
}

fn one() -> u32 {
    1
}

/// One SGLang worker (one HTTP server), with its attention-DP ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRecord {
    /// Unique in the deployment.
    pub id: WorkerId,
    /// What the worker does.
    pub role: Role,
    /// Base URL of its HTTP server, e.g. `http://10.0.0.7:30000`.
    pub url: String,
    /// The served model name.
    pub model: ModelName,
    /// PD bootstrap port (prefill workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_port: Option<u16>,
    /// Attention-DP ranks behind the one HTTP port (1 without DP attention).
    #[serde(default = "one")]
    pub dp_size: u32,
    /// KV page size in tokens.
    #[serde(default = "one")]
    pub page_size: u32,
    /// The SGLang version the worker runs, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sglang_version: Option<String>,
    /// Free-form labels (zone, node, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl WorkerRecord {
    /// The worker's targets, one per DP rank.
    pub fn targets(&self) -> impl Iterator<Item = Target> + '_ {
        (0..self.dp_size).map(|r| Target::new(self.id.clone(), DpRank(r)))
    }
}

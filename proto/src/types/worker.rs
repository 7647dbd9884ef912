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
    /// Checks the values every registry (static file, etcd) must hold to; the error names the
    /// problem. Duplicate ids are the registry's own check.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.id.as_str().trim().is_empty() || self.id.as_str().contains('/') {
            return Err("id must be non-empty and without '/'");
        }
        if self.model.as_str().trim().is_empty() {
            return Err("model must not be empty");
        }
        if self.dp_size == 0 {
            return Err("dp_size must be at least 1");
        }
        if self.page_size == 0 {
            return Err("page_size must be at least 1");
        }
        let rest = self.url.strip_prefix("http://").or_else(|| self.url.strip_prefix("https://"));
        let host = rest.and_then(|r| r.split(['/', '?', '#']).next()).map(|authority| {
            authority.strip_prefix('[').map_or_else(
                || authority.split(':').next().unwrap_or(""),
                |v6| v6.split(']').next().unwrap_or(""),
            )
        });
        if host.is_none_or(str::is_empty) {
            return Err("url must be an absolute http:// or https:// URL with a host");
        }
        if self.role != Role::Prefill && self.bootstrap_port.is_some() {
            return Err("bootstrap_port is for prefill workers only");
        }
        Ok(())
    }

    /// The worker's targets, one per DP rank.
    pub fn targets(&self) -> impl Iterator<Item = Target> + '_ {
        (0..self.dp_size).map(|r| Target::new(self.id.clone(), DpRank(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(url: &str, role: Role, bootstrap_port: Option<u16>) -> WorkerRecord {
        WorkerRecord {
            id: WorkerId::new("w"),
            role,
            url: url.into(),
            model: ModelName::new("m"),
            bootstrap_port,
            dp_size: 1,
            page_size: 1,
            sglang_version: None,
            labels: BTreeMap::new(),
        }
    }

    #[test]
    fn records_are_checked() {
        for ok in ["http://10.0.0.1:30000", "https://node-7", "http://[::1]:8000/"] {
            assert_eq!(record(ok, Role::Decode, None).check(), Ok(()), "{ok}");
        }
        for bad in ["10.0.0.1:30000", "http://", "http://:80", "ftp://h"] {
            assert!(record(bad, Role::Decode, None).check().is_err(), "{bad}");
        }
        assert!(record("http://h:1", Role::Decode, Some(8998)).check().is_err());
        assert!(record("http://h:1", Role::Prefill, Some(8998)).check().is_ok());
    }
}

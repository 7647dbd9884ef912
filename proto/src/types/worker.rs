//! Worker records: what a registry (the static workers file now, etcd later) says about a worker.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{DpRank, ModelName, Target, WorkerId};

mod build;

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
    /// Where the worker publishes its KV events (SGLang `--kv-events-config` with the `zmq`
    /// publisher); `None` when it publishes none and prefill routing falls back to load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events: Option<KvEventsSource>,
    /// Rank 0's load PUB socket, `tcp://host:port` (SGLang 0.5.19+ `--load-publish-endpoint`:
    /// rank `r` publishes its `LoadStat` on port + `r`, the base `/server_info` advertises as
    /// `kv_events.load_endpoint_port_base`); `None` when the worker publishes none and control
    /// only polls `/v1/loads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_events: Option<String>,
    /// Free-form labels (zone, node, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A worker's KV-event sockets. SGLang offsets both ports by the DP rank (`port + rank`), so the
/// record names rank 0's; the subscriber dials `port + rank` for every rank in `0..dp_size`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvEventsSource {
    /// Rank 0's PUB socket, `tcp://host:port` (a wildcard host is replaced by the worker's URL host
    /// by whoever writes the record).
    pub endpoint: String,
    /// Rank 0's replay ROUTER socket, `tcp://host:port`, when the worker keeps a replay buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_endpoint: Option<String>,
    /// The first frame of every message (SGLang's `topic`, empty by default).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub topic: String,
}

/// Rank `rank`'s load socket, given rank 0's.
///
/// # Errors
/// As the KV-event endpoints: not `tcp://host:port`, a wildcard host, or past port 65535.
pub fn load_endpoint_for_rank(endpoint: &str, rank: u32) -> Result<String, &'static str> {
    offset_port(endpoint, rank)
}

impl KvEventsSource {
    /// The PUB and replay endpoints of one DP rank: `port + rank` (SGLang's `offset_endpoint_port`).
    pub fn for_rank(&self, rank: u32) -> Result<(String, Option<String>), &'static str> {
        let pub_ep = offset_port(&self.endpoint, rank)?;
        let replay = self.replay_endpoint.as_deref().map(|e| offset_port(e, rank)).transpose()?;
        Ok((pub_ep, replay))
    }
}

fn offset_port(endpoint: &str, rank: u32) -> Result<String, &'static str> {
    let rest = endpoint
        .strip_prefix("tcp://")
        .ok_or("kv_events and load_events endpoints must be tcp://host:port")?;
    let (host, port) = rest.rsplit_once(':').ok_or("a kv_events or load_events endpoint has no port")?;
    let port: u32 = port.parse().map_err(|_| "a kv_events or load_events port is not a number")?;
    if host.is_empty() || host == "*" || host == "0.0.0.0" || host == "[::]" {
        return Err("kv_events and load_events endpoints need a concrete host, not a wildcard");
    }
    let port = port
        .checked_add(rank)
        .filter(|p| *p <= 65_535)
        .ok_or("a kv_events or load_events port + rank exceeds 65535")?;
    Ok(format!("tcp://{host}:{port}"))
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
        if let Some(kv) = &self.kv_events {
            kv.for_rank(self.dp_size - 1)?;
        }
        if let Some(load) = &self.load_events {
            load_endpoint_for_rank(load, self.dp_size - 1)?;
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
        WorkerRecord { bootstrap_port, ..WorkerRecord::new("w", role, url, "m") }
    }

    #[test]
    fn load_endpoints_follow_the_rank() {
        let mut r = record("http://h:1", Role::Decode, None);
        r.dp_size = 8;
        r.load_events = Some("tcp://10.0.0.7:5573".into());
        assert_eq!(r.check(), Ok(()));
        assert_eq!(load_endpoint_for_rank("tcp://10.0.0.7:5573", 7).unwrap(), "tcp://10.0.0.7:5580");
        for bad in ["tcp://*:5573", "ipc:///tmp/x", "tcp://h", "tcp://h:65530"] {
            r.load_events = Some(bad.into());
            assert!(r.check().is_err(), "{bad}");
        }
    }

    #[test]
    fn kv_endpoints_follow_the_rank() {
        let mut r = record("http://h:1", Role::Prefill, None);
        r.dp_size = 4;
        r.kv_events = Some(KvEventsSource {
            endpoint: "tcp://10.0.0.7:5557".into(),
            replay_endpoint: Some("tcp://10.0.0.7:5600".into()),
            topic: String::new(),
        });
        assert_eq!(r.check(), Ok(()));
        let (live, replay) = r.kv_events.as_ref().unwrap().for_rank(3).unwrap();
        assert_eq!((live.as_str(), replay.as_deref()), ("tcp://10.0.0.7:5560", Some("tcp://10.0.0.7:5603")));
        for bad in ["tcp://*:5557", "ipc:///tmp/x", "tcp://h", "tcp://h:65534"] {
            r.kv_events.as_mut().unwrap().endpoint = bad.into();
            assert!(r.check().is_err(), "{bad}");
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

//! Worker records: what a registry (the static workers file, etcd) says about a worker, and the
//! worker control routes to once its attention-DP ranks are known.

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
///
/// `Ranks` is what is known of the ranks: `u32` in the worker control routes to (the default),
/// `Option<u32>` in a record as a registry holds it ([`RegisteredWorker`]), where `dp_size` may
/// be left out and control asks the worker's `GET /server_info` for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, bound(serialize = "Ranks: Serialize + Copy + Into<Option<u32>>"))]
pub struct WorkerRecord<Ranks = u32> {
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
    /// DP ranks behind the one HTTP port (1 without DP): SGLang's `dp_size × attn_dp_size`. Required
    /// in a [`WorkerRecord`]; in a [`RegisteredWorker`] it may be left out (`None`). Control routes
    /// with the count the worker's `GET /server_info` reports either way; a value given that
    /// disagrees is reported as a record mismatch.
    #[serde(skip_serializing_if = "ranks_unknown")]
    pub dp_size: Ranks,
    /// KV page size in tokens. Control routes with the engine's (its `/server_info`), whatever
    /// the registry says.
    #[serde(default = "one")]
    pub page_size: u32,
    /// How the worker moves KV between prefill and decode (SGLang's
    /// `--disaggregation-transfer-backend`: `mooncake`, `nixl`, …); `None` when unknown. Control
    /// takes the engine's from its `/server_info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_backend: Option<String>,
    /// The KV cache's data type (SGLang's `--kv-cache-dtype`: `auto`, `fp8_e4m3`, …); `None` when
    /// unknown. Control takes the engine's from its `/server_info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<String>,
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

/// A worker record as a registry holds it: `dp_size` may be left out (`None`). Control asks every
/// worker's `/server_info` before routing to it.
pub type RegisteredWorker = WorkerRecord<Option<u32>>;

fn ranks_unknown<R: Copy + Into<Option<u32>>>(ranks: &R) -> bool {
    (*ranks).into().is_none()
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

/// The most DP ranks a worker may have: far above any real deployment, small enough that every
/// per-rank structure of a worker stays small (a record or an engine that reports more is
/// refused with a reason, never routed to).
pub const MAX_DP_RANKS: u32 = 1_024;

/// Whether `url` is a worker base URL every request can be built on: `http://` or `https://`,
/// a host, an optional numeric port, an optional path, and only the characters a URI allows
/// (no space, no control character). The error names the problem.
pub fn check_worker_url(url: &str) -> Result<(), &'static str> {
    const BAD: &str = "url must be an absolute http:// or https:// URL with a host";
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~:/[]@!$&'()*+,;=%".contains(c);
    if url.len() > 2_048 || !url.chars().all(allowed) {
        return Err("url must hold only URI characters (no space or control character), at most 2,048");
    }
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).ok_or(BAD)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or(BAD)?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err(BAD);
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err("url's port must be a number from 0 to 65535");
    }
    Ok(())
}

impl<Ranks: Copy + Into<Option<u32>>> WorkerRecord<Ranks> {
    /// Checks the values every registry (static file, etcd) must hold to; the error names the
    /// problem. Duplicate ids are the registry's own check. While the ranks are not known, the
    /// KV-event and load sockets are checked for rank 0 only (the rest once they are).
    pub fn check(&self) -> Result<(), &'static str> {
        let id = self.id.as_str();
        if id.trim().is_empty() || id.contains('/') || id.chars().any(char::is_control) {
            return Err("id must be non-empty, without '/' and without control characters");
        }
        if self.model.as_str().trim().is_empty() || self.model.as_str().chars().any(char::is_control) {
            return Err("model must not be empty nor hold control characters");
        }
        let dp_size: Option<u32> = self.dp_size.into();
        if dp_size == Some(0) {
            return Err("dp_size must be at least 1");
        }
        if dp_size.is_some_and(|n| n > MAX_DP_RANKS) {
            return Err("dp_size must be at most 1,024");
        }
        if self.id.as_str().len() > super::MAX_ID_BYTES || self.model.as_str().len() > super::MAX_ID_BYTES {
            return Err("id and model must be at most 256 bytes");
        }
        let last_rank = dp_size.map_or(0, |n| n - 1);
        if self.page_size == 0 {
            return Err("page_size must be at least 1");
        }
        check_worker_url(&self.url)?;
        if self.role != Role::Prefill && self.bootstrap_port.is_some() {
            return Err("bootstrap_port is for prefill workers only");
        }
        if let Some(kv) = &self.kv_events {
            kv.for_rank(last_rank)?;
        }
        if let Some(load) = &self.load_events {
            load_endpoint_for_rank(load, last_rank)?;
        }
        Ok(())
    }

    /// The same record with `dp_size` as its ranks.
    fn with_ranks<To>(self, dp_size: To) -> WorkerRecord<To> {
        WorkerRecord {
            id: self.id,
            role: self.role,
            url: self.url,
            model: self.model,
            bootstrap_port: self.bootstrap_port,
            dp_size,
            page_size: self.page_size,
            transfer_backend: self.transfer_backend,
            kv_cache_dtype: self.kv_cache_dtype,
            sglang_version: self.sglang_version,
            kv_events: self.kv_events,
            load_events: self.load_events,
            labels: self.labels,
        }
    }
}

impl RegisteredWorker {
    /// The worker to route to, with the `dp_size` ranks its `/server_info` reported.
    pub fn with_discovered_ranks(self, dp_size: u32) -> WorkerRecord {
        self.with_ranks(dp_size)
    }
}

impl From<WorkerRecord> for RegisteredWorker {
    fn from(record: WorkerRecord) -> Self {
        let dp_size = record.dp_size;
        record.with_ranks(Some(dp_size))
    }
}

impl WorkerRecord {
    /// The record as a registry would hold it with `dp_size` left out (for control to ask).
    pub fn without_dp_size(self) -> RegisteredWorker {
        self.with_ranks(None)
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
    fn ids_and_models_with_control_characters_are_refused_as_they_would_forge_log_lines() {
        let good = record("http://h:1", Role::Decode, None);
        assert!(good.check().is_ok());
        for bad in ["d\nERROR forged", "d\u{1b}[31m", "d\r"] {
            let mut r = good.clone();
            r.id = WorkerId::new(bad);
            assert!(r.check().is_err(), "{bad:?}");
            let mut r = good.clone();
            r.model = crate::types::ModelName::new(bad);
            assert!(r.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_registered_record_may_leave_dp_size_out() {
        let json = r#"{"id":"d","role":"decode","url":"http://h:1","model":"m"}"#;
        let left_out: RegisteredWorker = serde_json::from_str(json).unwrap();
        assert_eq!(left_out.dp_size, None);
        assert_eq!(left_out.check(), Ok(()));
        assert!(!serde_json::to_string(&left_out).unwrap().contains("dp_size"), "still left out");
        assert_eq!(left_out.with_discovered_ranks(8).targets().count(), 8);

        let given: RegisteredWorker =
            serde_json::from_str(r#"{"id":"d","role":"decode","url":"http://h:1","model":"m","dp_size":4}"#)
                .unwrap();
        assert_eq!(given.dp_size, Some(4), "a given size is read");
        let zero: RegisteredWorker =
            serde_json::from_str(r#"{"id":"d","role":"decode","url":"http://h:1","model":"m","dp_size":0}"#)
                .unwrap();
        assert!(zero.check().is_err());

        // The worker control routes to has its size; the launcher's records always say it.
        assert!(serde_json::from_str::<WorkerRecord>(json).unwrap_err().to_string().contains("dp_size"));
        let record = WorkerRecord::decode("d", "http://h:1", "m", 8);
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<RegisteredWorker>(&text).unwrap(), RegisteredWorker::from(record));
    }

    #[test]
    fn sockets_of_a_record_without_dp_size_are_checked_for_rank_zero_then_all() {
        let mut r = record("http://h:1", Role::Decode, None);
        r.load_events = Some("tcp://10.0.0.7:65530".into());
        let registered = r.without_dp_size();
        assert_eq!(registered.check(), Ok(()), "rank 0's port is valid");
        assert!(registered.with_discovered_ranks(8).check().is_err(), "rank 7's is past 65535");
    }

    #[test]
    fn records_are_checked() {
        for ok in ["http://10.0.0.1:30000", "https://node-7", "http://[::1]:8000/"] {
            assert_eq!(record(ok, Role::Decode, None).check(), Ok(()), "{ok}");
        }
        for bad in [
            "10.0.0.1:30000",
            "http://",
            "http://:80",
            "ftp://h",
            // Pass a prefix check, yet no request can be built on them.
            "http://h:30000/ x",
            "http://h:30000\n",
            "http://h:99999",
            "http://h:port",
            "http://[::1",
        ] {
            assert!(record(bad, Role::Decode, None).check().is_err(), "{bad:?}");
            assert!(check_worker_url(bad).is_err(), "{bad:?}");
        }
        for ok in ["http://10.0.0.1:30000", "https://user@node-7:443/prefix", "http://[fe80::1]:8000"] {
            let built = format!("{ok}/v1/loads").parse::<http::Uri>();
            assert!(check_worker_url(ok).is_ok() && built.is_ok(), "{ok}");
        }
        assert!(record("http://h:1", Role::Decode, Some(8998)).check().is_err());
        let mut wide = record("http://h:1", Role::Decode, None);
        wide.dp_size = MAX_DP_RANKS + 1;
        assert_eq!(wide.check(), Err("dp_size must be at most 1,024"));
        assert!(record("http://h:1", Role::Prefill, Some(8998)).check().is_ok());
    }
}

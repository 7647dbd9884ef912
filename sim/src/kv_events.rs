//! `--kv-events-config` (SGLang's `ZmqEventPublisher`, `python/sglang/srt/disaggregation/kv_events.py`
//! in SGLang 0.5.23; manual/features/kv_aware_routing.md): with `"publisher": "zmq"`,
//! one SGLang-framed publisher per DP rank — PUB on the `endpoint` port + rank, replay ROUTER on
//! the `replay_endpoint` port + rank — in the event encoding and replay-reply format of the
//! emulated `--sim-sglang-version`, and the `/server_info.kv_events` descriptor.
//!
//! Unlike SGLang, port 0 is allowed (tests): rank 0 binds a free port and rank `r` binds that
//! port + `r`, retried on collision; the descriptor reports the ports bound. The sim always
//! binds (SGLang connects a PUB socket whose endpoint names a concrete host and `bind` is unset).

use infera_kv::event::KvEvent;
use infera_kv::publish::{PublishError, Publisher, PublisherConfig};
use serde::Deserialize;
use serde_json::{Value, json};

/// Binding attempts when a port is picked (0): another process may take `port + rank` first.
const PICK_ATTEMPTS: usize = 16;

/// SGLang's `KVEventsConfig` (pydantic): the keys the emulator uses, SGLang's defaults, unknown
/// keys ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KvEventsConfig {
    /// `"zmq"` or `"null"`.
    #[serde(default = "default_publisher")]
    pub publisher: String,
    /// Rank 0's PUB address.
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// Rank 0's replay ROUTER address.
    #[serde(default)]
    pub replay_endpoint: Option<String>,
    /// Batches kept for replay.
    #[serde(default = "default_buffer_steps")]
    pub buffer_steps: usize,
    /// Batches queued before new ones are dropped.
    #[serde(default = "default_max_queue_size")]
    pub max_queue_size: usize,
    /// The first frame of every message.
    #[serde(default)]
    pub topic: String,
}

fn default_publisher() -> String {
    "null".to_owned()
}
fn default_endpoint() -> String {
    "tcp://*:5557".to_owned()
}
fn default_buffer_steps() -> usize {
    10_000
}
fn default_max_queue_size() -> usize {
    100_000
}

/// A `--kv-events-config` the emulator cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum KvEventsError {
    /// Not JSON, or a key of the wrong type.
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A publisher other than `zmq` and `null`.
    #[error("unknown publisher {0:?} (expected \"zmq\" or \"null\")")]
    Publisher(String),
    /// An endpoint that is not `tcp://host:port`.
    #[error("{0:?}: the emulator publishes on tcp://host:port endpoints only")]
    Endpoint(String),
    /// `port + rank` past 65535.
    #[error("{endpoint:?}: port + rank {rank} exceeds 65535")]
    PortRange {
        /// The endpoint that could not be bound.
        endpoint: String,
        /// The DP rank it was for.
        rank: u32,
    },
    /// A socket could not be bound.
    #[error(transparent)]
    Bind(#[from] PublishError),
}

/// `tcp://host:port`, split.
#[derive(Debug, Clone)]
pub(crate) struct TcpEndpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl TcpEndpoint {
    pub(crate) fn parse(endpoint: &str) -> Result<Self, KvEventsError> {
        let bad = || KvEventsError::Endpoint(endpoint.to_owned());
        let (host, port) =
            endpoint.strip_prefix("tcp://").and_then(|r| r.rsplit_once(':')).ok_or_else(bad)?;
        let port = port.parse().map_err(|_| bad())?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Self { host: host.to_owned(), port })
    }

    /// This endpoint offset by `rank` from `base` (SGLang's `offset_endpoint_port`).
    pub(crate) fn at(&self, base: u16, rank: u32) -> Result<String, KvEventsError> {
        let port = u32::from(base) + rank;
        let port = u16::try_from(port).map_err(|_| KvEventsError::PortRange {
            endpoint: format!("tcp://{}:{base}", self.host),
            rank,
        })?;
        Ok(format!("tcp://{}:{port}", self.host))
    }
}

impl KvEventsConfig {
    /// Parses `--kv-events-config`; `None` for the `null` publisher.
    pub fn parse(raw: &str) -> Result<Option<Self>, KvEventsError> {
        let config: Self = serde_json::from_str(raw)?;
        match config.publisher.as_str() {
            "null" => return Ok(None),
            "zmq" => {}
            other => return Err(KvEventsError::Publisher(other.to_owned())),
        }
        TcpEndpoint::parse(&config.endpoint)?;
        if let Some(replay) = &config.replay_endpoint {
            TcpEndpoint::parse(replay)?;
        }
        Ok(Some(config))
    }
}

/// What `/server_info` tells subscribers about the bound sockets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEventsInfo {
    /// The configured PUB host (`*` stays a wildcard; subscribers use the worker's host).
    pub host: String,
    /// Rank 0's PUB port.
    pub port_base: u16,
    /// Rank 0's replay port.
    pub replay_port_base: Option<u16>,
    /// The first frame of every message (`topic` of `--kv-events-config`).
    pub topic: String,
}

impl KvEventsInfo {
    /// `/server_info.kv_events`; `replay_key`: SGLang ≥ 0.5.22 advertises the replay port.
    pub fn describe(&self, block_size: u32, ranks: u32, replay_key: bool) -> Value {
        let mut d = json!({
            "publisher": "zmq",
            "endpoint_host": self.host,
            "endpoint_port_base": self.port_base,
            "topic": self.topic,
            "block_size": block_size,
            "dp_size": ranks,
        });
        if let (true, Some(port)) = (replay_key, self.replay_port_base) {
            d["replay_endpoint_port_base"] = json!(port);
        }
        d
    }
}

/// One publisher per rank, bound, each having published the start-up `AllBlocksCleared`.
#[derive(Debug)]
pub struct KvEventsSockets {
    /// Rank `r`'s publisher at index `r`.
    pub publishers: Vec<Publisher>,
    /// The descriptor's facts.
    pub info: KvEventsInfo,
}

/// Binds the sockets of `ranks` ranks for SGLang `version`.
pub async fn bind(
    config: &KvEventsConfig,
    ranks: u32,
    version: &str,
) -> Result<KvEventsSockets, KvEventsError> {
    let live = TcpEndpoint::parse(&config.endpoint)?;
    let replay = config.replay_endpoint.as_deref().map(TcpEndpoint::parse).transpose()?;
    let picks = live.port == 0 || replay.as_ref().is_some_and(|r| r.port == 0);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match bind_ranks(config, &live, replay.as_ref(), ranks.max(1), version).await {
            Err(KvEventsError::Bind(e)) if picks && attempt < PICK_ATTEMPTS => {
                tracing::debug!(error = %e, attempt, "KV-event ports collided; picking again");
            }
            result => return result,
        }
    }
}

async fn bind_ranks(
    config: &KvEventsConfig,
    live: &TcpEndpoint,
    replay: Option<&TcpEndpoint>,
    ranks: u32,
    version: &str,
) -> Result<KvEventsSockets, KvEventsError> {
    let (mut base, mut replay_base) = (live.port, replay.map_or(0, |r| r.port));
    let mut publishers = Vec::with_capacity(ranks as usize);
    for rank in 0..ranks {
        let mut pc = PublisherConfig::new(live.at(base, rank)?).for_sglang(version);
        pc.replay_endpoint = replay.map(|r| r.at(replay_base, rank)).transpose()?;
        pc.topic = config.topic.clone();
        pc.buffer_steps = config.buffer_steps;
        pc.max_queue_size = config.max_queue_size;
        pc.attn_dp_rank = Some(rank);
        let publisher = Publisher::bind(pc).await?;
        if rank == 0 {
            base = publisher.port();
            replay_base = publisher.replay_port().unwrap_or(0);
        }
        // The radix cache's constructor resets it: SGLang's first batch is AllBlocksCleared.
        publisher.publish(vec![KvEvent::AllBlocksCleared])?;
        publishers.push(publisher);
    }
    let info = KvEventsInfo {
        host: live.host.clone(),
        port_base: base,
        replay_port_base: replay.map(|_| replay_base),
        topic: config.topic.clone(),
    };
    tracing::info!(host = %info.host, port_base = base, replay_port_base = ?info.replay_port_base, ranks,
        "publishing KV events");
    Ok(KvEventsSockets { publishers, info })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_like_sglang() {
        assert_eq!(KvEventsConfig::parse(r#"{"publisher": "null"}"#).unwrap(), None);
        assert_eq!(KvEventsConfig::parse("{}").unwrap(), None, "the default publisher is null");
        let c = KvEventsConfig::parse(r#"{"publisher":"zmq","topic":"kv","hwm":5,"bind":true}"#)
            .unwrap()
            .unwrap();
        assert_eq!((c.endpoint.as_str(), c.topic.as_str(), c.buffer_steps), ("tcp://*:5557", "kv", 10_000));
        for bad in [
            r#"{"publisher":"kafka"}"#,
            r#"{"publisher":"zmq","endpoint":"ipc:///tmp/x"}"#,
            r#"{"publisher":"zmq","replay_endpoint":"tcp://h"}"#,
            r#"{"publisher":"zmq","buffer_steps":"many"}"#,
            "not json",
        ] {
            assert!(KvEventsConfig::parse(bad).is_err(), "{bad}");
        }
        let e = TcpEndpoint::parse("tcp://*:65535").unwrap();
        assert!(e.at(65_535, 1).is_err());
        assert_eq!(e.at(5557, 3).unwrap(), "tcp://*:5560");
    }

    #[test]
    fn the_descriptor_follows_the_version() {
        let info = KvEventsInfo {
            host: "*".into(),
            port_base: 5557,
            replay_port_base: Some(5600),
            topic: "".into(),
        };
        let d = info.describe(16, 4, true);
        assert_eq!(
            d,
            json!({"publisher": "zmq", "endpoint_host": "*", "endpoint_port_base": 5557, "topic": "",
                   "block_size": 16, "dp_size": 4, "replay_endpoint_port_base": 5600})
        );
        assert!(info.describe(16, 4, false).get("replay_endpoint_port_base").is_none());
    }
}

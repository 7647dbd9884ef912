//! `--load-publish-endpoint` (SGLang 0.5.23 `SchedulerLoadPublisher`,
//! `python/sglang/srt/managers/scheduler_components/load_publisher.py`, its range from
//! `resolve_load_pub_range` in `python/sglang/srt/disaggregation/kv_events.py`): each DP rank
//! publishes its load as a `LoadStat` on its own PUB socket, `[b"load", seq, payload]`, at once
//! when it changes and on a 1 s heartbeat otherwise, and `/server_info.kv_events` advertises rank
//! 0's port as `load_endpoint_port_base` with `load_topic`.
//!
//! As in SGLang the socket needs a `zmq` `--kv-events-config` (routers find the range through
//! its descriptor), `off` or unset disables it, `auto` packs the range after the KV-event PUB
//! range (past the replay range when they overlap), and an address places it; rank `r` binds
//! port + `r`. Unlike SGLang, port 0 is allowed (tests): a picked port for rank 0, and `auto`
//! picks too when the KV-event ports were picked. The readings are the counters `/v1/loads`
//! reports (`engine.snapshot()`), checked every [`CHECK_EVERY`] (SGLang checks every few
//! scheduler iterations).

use std::future::Future;
use std::time::{Duration, Instant};

use infera_kv::load::{LoadPublisher, LoadStat};
use infera_kv::publish::PublishError;

use crate::engine::Engine;
use crate::kv_events::{KvEventsConfig, KvEventsError, KvEventsInfo, TcpEndpoint};
use crate::scheduler::RankSnapshot;
use crate::sglang_flags::SglangFlags;

/// How often the ranks' counters are compared with what was last sent.
pub const CHECK_EVERY: Duration = Duration::from_millis(10);
/// Binding attempts when a port is picked (0): another process may take `port + rank` first.
const PICK_ATTEMPTS: usize = 16;

/// Where the load range goes.
#[derive(Debug, Clone)]
pub enum LoadEndpoint {
    /// After the KV-event range.
    Auto,
    /// Rank 0 at this address.
    At(String),
}

/// A `--load-publish-endpoint` the emulator cannot run with (SGLang fails at start-up too:
/// `check_load_publish_args` in `python/sglang/srt/arg_groups/validation_hook.py`, 0.5.23).
#[derive(Debug, thiserror::Error)]
pub enum LoadEventsError {
    /// No `zmq` KV-event publisher to advertise the range through.
    #[error(
        "--load-publish-endpoint requires --kv-events-config with the zmq publisher: routers discover the load range through /server_info's kv_events block"
    )]
    NoKvEvents,
    /// Not `tcp://host:port`, or `port + rank` past 65535.
    #[error("--load-publish-endpoint: {0}")]
    Endpoint(#[from] KvEventsError),
    /// A socket could not be bound.
    #[error("--load-publish-endpoint: {0}")]
    Bind(#[from] PublishError),
}

impl LoadEndpoint {
    /// The flag's value at SGLang `version`: `None` when unset or `off`, and when the version
    /// has no such flag (the sim's parser takes it at every version; a warning is pushed).
    ///
    /// # Errors
    /// When it is set without a `zmq` KV-event publisher, or is neither `auto` nor
    /// `tcp://host:port`.
    pub fn parse(
        raw: Option<&str>,
        kv: Option<&KvEventsConfig>,
        version: &str,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Self>, LoadEventsError> {
        let flags = SglangFlags::for_version(version);
        if raw.is_some() && flags.arity("load-publish-endpoint").is_none() {
            warnings.push(format!("ignoring --load-publish-endpoint ({} has no such flag)", flags.source));
            return Ok(None);
        }
        let mode = raw.map(str::trim).unwrap_or_default();
        if mode.is_empty() || mode.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        if kv.is_none() {
            return Err(LoadEventsError::NoKvEvents);
        }
        if mode.eq_ignore_ascii_case("auto") {
            return Ok(Some(Self::Auto));
        }
        TcpEndpoint::parse(mode)?;
        Ok(Some(Self::At(mode.to_owned())))
    }
}

/// One load publisher per rank, bound.
#[derive(Debug)]
pub struct LoadSockets {
    /// Rank `r`'s socket at index `r`.
    pub publishers: Vec<LoadPublisher>,
    /// Rank 0's port (`load_endpoint_port_base`).
    pub port_base: u16,
}

/// Binds `ranks` load sockets; `kv` is the KV-event publisher already bound from `kv_config`.
///
/// # Errors
/// When an endpoint is malformed or a port cannot be bound.
pub async fn bind(
    endpoint: &LoadEndpoint,
    kv_config: &KvEventsConfig,
    kv: &KvEventsInfo,
    ranks: u32,
) -> Result<LoadSockets, LoadEventsError> {
    let ranks = ranks.max(1);
    let first = match endpoint {
        LoadEndpoint::At(at) => TcpEndpoint::parse(at)?,
        LoadEndpoint::Auto => {
            let asked = TcpEndpoint::parse(&kv_config.endpoint)?;
            let mut base = u32::from(kv.port_base) + ranks;
            // With the conventional replay = kv + ranks the two overlap: pack after the replay range.
            if let Some(replay) =
                kv.replay_port_base.map(u32::from).filter(|&r| base < r + ranks && r < base + ranks)
            {
                base = replay + ranks;
            }
            let picked = asked.port == 0;
            let port = if picked { 0 } else { u16::try_from(base).unwrap_or(u16::MAX) };
            TcpEndpoint { host: asked.host, port }
        }
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        match bind_ranks(&first, ranks).await {
            Err(LoadEventsError::Bind(e)) if first.port == 0 && attempt < PICK_ATTEMPTS => {
                tracing::debug!(error = %e, attempt, "load ports collided; picking again");
            }
            result => return result,
        }
    }
}

async fn bind_ranks(first: &TcpEndpoint, ranks: u32) -> Result<LoadSockets, LoadEventsError> {
    let mut base = first.port;
    let mut publishers = Vec::with_capacity(ranks as usize);
    for rank in 0..ranks {
        let publisher = match LoadPublisher::bind(&first.at(base, rank)?).await {
            Ok(p) => p,
            Err(e) => {
                for p in publishers {
                    LoadPublisher::close(p).await;
                }
                return Err(e.into());
            }
        };
        if rank == 0 {
            base = publisher.port();
        }
        publishers.push(publisher);
    }
    tracing::info!(host = %first.host, port_base = base, ranks, "publishing load readings");
    Ok(LoadSockets { publishers, port_base: base })
}

/// The per-engine limits a reading carries besides the rank's counters.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// KV capacity in tokens (`max_total_num_tokens`).
    pub capacity: u64,
    /// `--max-running-requests`.
    pub max_running_requests: u32,
}

/// Rank `rank`'s reading: the counters `/v1/loads` reports for it (`api::info::loads`).
pub fn load_stat(rank: u32, s: &RankSnapshot, limits: Limits) -> LoadStat {
    LoadStat {
        num_running_reqs: u64::from(s.running),
        num_waiting_reqs: u64::from(s.waiting),
        num_tokens: s.used_tokens,
        max_total_num_tokens: limits.capacity,
        attn_dp_rank: Some(rank),
        num_waiting_uncached_tokens: s.waiting_uncached_tokens,
        num_total_tokens: s.used_tokens,
        max_running_requests: u64::from(limits.max_running_requests),
        total_prefill_uncached_tokens: 0,
        total_prefill_busy_us: 0,
    }
}

/// Publishes every rank's reading until `stop` resolves, then closes the sockets.
pub async fn publish(
    engine: Engine,
    limits: Limits,
    mut publishers: Vec<LoadPublisher>,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        // A hung scheduler publishes nothing.
        if engine.hung() {
            continue;
        }
        let now = Instant::now();
        for (rank, snapshot) in engine.snapshot().iter().enumerate() {
            if let Some(p) = publishers.get_mut(rank) {
                p.offer(load_stat(rank as u32, snapshot, limits), now).await;
            }
        }
    }
    for p in publishers {
        p.close().await;
    }
}

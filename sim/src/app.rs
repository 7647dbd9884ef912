//! What every handler shares: configuration, the engine, the room table, fault knobs, the
//! request log, and the seeded sources of request ids and output text.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::clock::Clock;
use crate::config::SimConfig;
use crate::disaggregation::DisaggregationMode;
use crate::engine::Engine;
use crate::faults::FaultKnobs;
use crate::kv_events::{KvEventsInfo, KvEventsSockets};
use crate::pull::KvClient;
use crate::request_log::RequestLog;
use crate::rooms::Rooms;
use crate::scheduler::{KvBudget, Scheduler};

/// Shared state of one emulated engine.
#[derive(Debug)]
pub struct App {
    /// Configuration.
    pub config: SimConfig,
    /// The scheduler driver every request is paced by.
    pub engine: Engine,
    /// PD rooms (prefill role).
    pub rooms: Arc<Rooms>,
    /// Fault knobs.
    pub faults: FaultKnobs,
    /// Requests received.
    pub log: RequestLog,
    /// Bootstrap long-poll client (decode role).
    pub kv_client: KvClient,
    /// Seed of output text.
    pub seed: u64,
    /// Unix seconds at start (`created` fields).
    pub created: u64,
    /// The KV-event sockets, when `--kv-events-config` publishes.
    pub kv_events: Option<KvEventsInfo>,
    /// Rank 0's load PUB port, when `--load-publish-endpoint` publishes.
    pub load_port_base: Option<u16>,
    rng: Mutex<SmallRng>,
    round_robin: AtomicU64,
    serving: AtomicBool,
}

impl App {
    /// The state for `config`, its engine's clock starting now, publishing no KV events.
    pub fn new(config: SimConfig) -> Self {
        Self::with_kv_events(config, None)
    }

    /// The state for `config`; its ranks publish KV events on `kv` when given.
    pub fn with_kv_events(config: SimConfig, kv: Option<KvEventsSockets>) -> Self {
        let seed = config.seed.unwrap_or_else(|| SmallRng::from_os_rng().random());
        let core = Scheduler::new(
            config.params.clone(),
            config.ranks as usize,
            config.chunk_tokens,
            config.page_size,
            config.queue_order,
        )
        // The pool is enforced where the scheduler models SGLang's budget: on a PD decode.
        .with_kv_budget(match config.mode {
            DisaggregationMode::Decode => config.kv,
            _ => KvBudget { capacity: None, ..config.kv },
        });
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (publishers, kv_events) = kv.map_or((Vec::new(), None), |k| (k.publishers, Some(k.info)));
        Self {
            engine: Engine::with_kv_events(core, Clock::start(config.speedup), publishers),
            kv_events,
            load_port_base: None,
            rooms: Arc::new(Rooms::default()),
            faults: FaultKnobs::new(config.faults),
            log: RequestLog::default(),
            kv_client: KvClient::default(),
            seed,
            created,
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            round_robin: AtomicU64::new(0),
            serving: AtomicBool::new(true),
            config,
        }
    }

    /// A fresh request id (32 hex digits, like SGLang's `uuid4().hex`), from the seed.
    pub fn new_rid(&self) -> String {
        let mut rng = self.rng.lock().unwrap();
        format!("{:016x}{:016x}", rng.random::<u64>(), rng.random::<u64>())
    }

    /// The next round-robin counter.
    pub fn next_round_robin(&self) -> u64 {
        self.round_robin.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether health checks pass (false once shutdown began).
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Relaxed)
    }

    /// Health checks fail from now on.
    pub fn stop_serving(&self) {
        self.serving.store(false, Ordering::Relaxed);
    }
}

//! Real SGLang workers: the SGLang 0.5.23 server (its HTTP server, tokenizer manager,
//! scheduler, radix cache, bootstrap server, Mooncake transfer, KV-event publisher) running the
//! tiny model on this machine's CPUs, described like a [`crate::SimSpec`] with the launcher's
//! typed SGLang arguments and rendered by the launcher for 0.5.23. `cargo xtask setup` installs
//! it (manual/guides/testing.md).
//!
//! Each server costs ≈ 20 s and ≈ 2 GB: a test binary starts its servers once and shares them.

mod child;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use infera_launcher::WorkerPlan;
use infera_launcher::records::worker_record;
use infera_launcher::sglang::{
    Disaggregation, DisaggregationMode, Graphs, KvEvents, LoadEvents, Parallel, Scheduling,
    Server as SglangServer, SglangArgs,
};
use infera_launcher::version::SglangVersion;
use infera_proto::types::{Role, WorkerRecord};
use serde_json::Value;

use self::child::{ChildSpec, EngineChild};

/// Starts of one engine tried when another process took one of its ports first.
const PORT_RACE_ATTEMPTS: u32 = 3;
use crate::http;
use crate::ports::free_ports;

/// The SGLang release the kit runs.
pub const VERSION: SglangVersion = SglangVersion::NEWEST;

/// How long a server may take to be ready (≈ 20 s alone; much more while a build shares the
/// cores).
const READY_DEADLINE: Duration = Duration::from_secs(240);
/// How long a stopped server may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// KV slots per DP rank unless a spec says otherwise: without `--max-total-tokens` SGLang sizes
/// the pool from free RAM (`--mem-fraction-static` of it), gigabytes on a shared machine.
pub const DEFAULT_MAX_TOTAL_TOKENS: u64 = 16_384;

/// The SGLang flags of the CPU path (SGLang 0.5.23 on `SGLANG_USE_CPU_ENGINE=1`): the CPU
/// device; native-torch attention and sampling (the default x86 attention backend needs AMX);
/// no overlap scheduler; a scheduler that sleeps when idle instead of polling a core.
pub const CPU_FLAGS: &[&str] = &[
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--sampling-backend",
    "pytorch",
    "--sleep-on-idle",
];

/// A PD decode's retraction backup on the CPU path: the default host pool pins memory with
/// `cudaHostRegister` (`sglang/srt/mem_cache/pool_host/common.py`).
pub const CPU_DECODE_FLAGS: &[&str] = &["--disaggregation-decode-retraction-backup", "cpu_tensor"];

/// The venv Python holding the server: `INFERA_SGLANG_ENGINE_PYTHON`, else the venv
/// `cargo xtask setup` made.
pub fn python() -> PathBuf {
    std::env::var_os("INFERA_SGLANG_ENGINE_PYTHON")
        .map_or_else(|| workspace().join(".venv-sglang-engine/bin/python"), PathBuf::from)
}

/// The tiny model's folder (its `tokenizer.json` is the proxies' tokenizer):
/// `INFERA_SGLANG_ENGINE_MODEL`, else where `cargo xtask setup` wrote it.
pub fn model_dir() -> PathBuf {
    std::env::var_os("INFERA_SGLANG_ENGINE_MODEL")
        .map_or_else(|| workspace().join(".venv-sglang-engine/tiny-llama"), PathBuf::from)
}

/// The environment of a CPU worker: the CPU platform, the stand-ins on `PYTHONPATH`
/// (`testkit/sglang_cpu/pythonpath`), Mooncake over TCP.
pub fn cpu_env() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("SGLANG_USE_CPU_ENGINE".to_owned(), "1".to_owned()),
        ("PYTHONPATH".to_owned(), child::cpu_pythonpath().display().to_string()),
        ("MOONCAKE_PROTOCOL".to_owned(), "tcp".to_owned()),
    ])
}

/// The model name `SimSpec::new` is given before its arguments are replaced by the engine's.
const MODEL_PLACEHOLDER: &str = "tiny";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("testkit is in the workspace").to_owned()
}

/// One real SGLang worker to start.
#[derive(Clone, Debug)]
pub struct EngineSpec {
    /// The worker id (its record's `id`).
    pub name: String,
    /// Prefill, decode or mixed.
    pub role: Role,
    /// Its SGLang command line (ports 0 are picked when it starts).
    pub args: SglangArgs,
    /// `--max-total-tokens` per DP rank.
    pub max_total_tokens: u64,
}

impl EngineSpec {
    /// A worker of `role` serving the tiny model as `model`, one rank.
    pub fn new(name: &str, role: Role, model: &str) -> Self {
        let mode = match role {
            Role::Prefill => Some(DisaggregationMode::Prefill),
            Role::Decode => Some(DisaggregationMode::Decode),
            Role::Mixed => None,
        };
        let args = SglangArgs {
            version: VERSION,
            server: SglangServer {
                model_path: model_dir().display().to_string(),
                served_model_name: Some(model.to_owned()),
                host: "127.0.0.1".to_owned(),
                port: 0,
                trust_remote_code: false,
                context_length: None,
                page_size: None,
                enable_metrics: false,
            },
            parallel: Parallel { tp: 1, pp: 1, dp: 1, attn_dp: 1 },
            disaggregation: mode.map(|mode| Disaggregation {
                mode,
                bootstrap_port: (mode == DisaggregationMode::Prefill).then_some(0),
                backend: None,
                ib_devices: Vec::new(),
            }),
            scheduling: Scheduling { disable_overlap_schedule: true, ..Scheduling::default() },
            graphs: Graphs::default(),
            hicache: None,
            speculative: None,
            kv_events: None,
            load_events: None,
            extra: Vec::new(),
        };
        Self { name: name.to_owned(), role, args, max_total_tokens: DEFAULT_MAX_TOTAL_TOKENS }
    }

    /// A prefill worker.
    pub fn prefill(name: &str, model: &str) -> Self {
        Self::new(name, Role::Prefill, model)
    }

    /// A decode worker.
    pub fn decode(name: &str, model: &str) -> Self {
        Self::new(name, Role::Decode, model)
    }

    /// An aggregated worker.
    pub fn mixed(name: &str, model: &str) -> Self {
        Self::new(name, Role::Mixed, model)
    }

    /// `--dp-size n`: plain data parallelism, n schedulers behind one HTTP port (DP attention
    /// needs CUDA).
    pub fn dp(mut self, n: u32) -> Self {
        self.args.parallel.dp = n.max(1);
        self
    }

    /// `--page-size`.
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.args.server.page_size = Some(page_size);
        self
    }

    /// `--max-total-tokens` per DP rank.
    pub fn max_total_tokens(mut self, tokens: u64) -> Self {
        self.max_total_tokens = tokens;
        self
    }

    /// `--enable-metrics`.
    pub fn metrics(mut self) -> Self {
        self.args.server.enable_metrics = true;
        self
    }

    /// Publishes KV events under `topic` (ports picked when it starts).
    pub fn kv_events(mut self, topic: &str) -> Self {
        self.args.kv_events = Some(KvEvents { port: 0, replay_port: 0, topic: topic.to_owned() });
        self
    }

    /// Each rank also publishes its load (needs [`EngineSpec::kv_events`]).
    pub fn load_events(mut self) -> Self {
        self.args.load_events = Some(LoadEvents { port: 0 });
        self
    }

    /// More SGLang flags, verbatim.
    pub fn extra<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.args.extra.extend(flags.into_iter().map(Into::into));
        self
    }

    /// Its arguments with the CPU path's flags and `--max-total-tokens` (ports still 0).
    pub fn cpu_args(&self) -> SglangArgs {
        let mut args = self.args.clone();
        args.extra.extend(CPU_FLAGS.iter().map(|f| (*f).to_owned()));
        args.extra.extend(["--max-total-tokens".to_owned(), self.max_total_tokens.to_string()]);
        if self.role == Role::Decode {
            args.extra.extend(CPU_DECODE_FLAGS.iter().map(|f| (*f).to_owned()));
        }
        args
    }

    /// An `infera-sim` started with exactly this worker's SGLang flags (the sim takes SGLang's
    /// command line, and reports the flags it does not model in `/server_info`).
    pub fn sim(&self) -> crate::SimSpec {
        let mut sim = crate::SimSpec::new(&self.name, self.role, MODEL_PLACEHOLDER);
        sim.args = self.cpu_args();
        sim
    }

    /// Its plan with the CPU flags and environment, on free ports: what the launcher would run.
    ///
    /// # Errors
    /// When no free ports are found.
    pub fn plan(&self) -> anyhow::Result<WorkerPlan> {
        let ranks = self.args.parallel.dp_ranks();
        let span = u16::try_from(ranks)?;
        let mut args = self.args.clone();
        let [http, bootstrap, pubs, replays, loads] = free_ports(&[1, 1, span, span, span])?[..] else {
            unreachable!("five ranges")
        };
        args.server.port = http;
        if let Some(d) = args.disaggregation.as_mut().filter(|d| d.mode == DisaggregationMode::Prefill) {
            d.bootstrap_port = Some(bootstrap);
        }
        if let Some(k) = args.kv_events.as_mut() {
            (k.port, k.replay_port) = (pubs, replays);
            if let Some(l) = args.load_events.as_mut() {
                l.port = loads;
            }
        }
        args.extra = self.cpu_args().extra;
        let python = python().display().to_string();
        let mut env = cpu_env();
        if ranks > 1 {
            // SGLang's CPU path gives each rank a NUMA node unless told which cores it takes
            // (`SGLANG_CPU_OMP_THREADS_BIND`, `sglang/srt/utils/common.py`): one core a rank here.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            let bind: Vec<String> = (0..ranks).map(|r| (r % cores).to_string()).collect();
            env.insert("SGLANG_CPU_OMP_THREADS_BIND".to_owned(), bind.join("|"));
        }
        Ok(WorkerPlan {
            name: self.name.clone(),
            role: self.role,
            host: args.server.host.clone(),
            gpus: Vec::new(),
            program: vec![python, "-m".to_owned(), "sglang.launch_server".to_owned()],
            args,
            env,
        })
    }

    /// Starts it and waits until SGLang says it is ready (its warm-up request served).
    ///
    /// # Errors
    /// When it cannot start or is not ready in time.
    pub async fn start(self) -> anyhow::Result<Engine> {
        // SGLang cannot bind port 0, so its ports are found free and released; it binds its HTTP
        // port only after tens of seconds of start-up, and another engine starting beside it
        // may take one meanwhile. A start that loses that race is retried on fresh ports.
        let mut attempt = 1;
        let (plan, child) = loop {
            let plan = self.plan()?;
            let spec = ChildSpec {
                name: self.name.clone(),
                argv: plan.argv(),
                env: plan.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            };
            match tokio::task::spawn_blocking(move || EngineChild::start(&spec, READY_DEADLINE)).await? {
                Ok(child) => break (plan, child),
                Err(e)
                    if attempt < PORT_RACE_ATTEMPTS && e.to_string().contains("address already in use") =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let record = worker_record(&plan);
        let http: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, plan.args.server.port).into();
        let bootstrap = record.bootstrap_port.map(|p| SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, p)));
        Ok(Engine { url: record.url.clone(), http, bootstrap, record, plan, child })
    }
}

/// A running SGLang server (SIGKILLed on drop).
#[derive(Debug)]
pub struct Engine {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its HTTP address.
    pub http: SocketAddr,
    /// A prefill's bootstrap address.
    pub bootstrap: Option<SocketAddr>,
    /// Its worker record, as the launcher would register it.
    pub record: WorkerRecord,
    /// What it runs.
    pub plan: WorkerPlan,
    child: EngineChild,
}

impl Engine {
    /// GET `path` as JSON.
    ///
    /// # Errors
    /// When it does not answer 2xx with JSON.
    pub async fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        http::get_json(&format!("{}{path}", self.url)).await
    }

    /// Its `/v1/loads` entries, one per DP rank.
    ///
    /// # Errors
    /// When it does not answer.
    pub async fn loads(&self) -> anyhow::Result<Vec<Value>> {
        let v = self.get_json("/v1/loads").await?;
        Ok(v["loads"].as_array().cloned().unwrap_or_default())
    }

    /// Requests running or queued on any rank, as `/v1/loads` counts them.
    ///
    /// # Errors
    /// When it does not answer.
    pub async fn in_flight(&self) -> anyhow::Result<u64> {
        let count = |l: &Value, key: &str| l[key].as_u64().unwrap_or(0);
        let loads = self.loads().await?;
        Ok(loads.iter().map(|l| count(l, "num_running_reqs") + count(l, "num_waiting_reqs")).sum())
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child.running()
    }

    /// The last lines it logged (for assertion messages).
    pub fn log_tail(&self) -> String {
        self.child.log_tail()
    }

    /// SIGTERM, SIGKILL after a grace.
    pub async fn stop(mut self) {
        let _ = tokio::task::spawn_blocking(move || self.child.stop(STOP_GRACE)).await;
    }
}

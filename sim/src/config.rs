//! SGLang's command line (the flags the emulator honours; SGLang's others are dropped, and
//! flags SGLang itself would reject with a warning, see [`crate::argv`]) plus `--sim-*` flags → validated [`SimConfig`]. Every flag is
//! also an `INFERA_SIM_*` environment variable.

mod memory;
mod ssl;
#[cfg(test)]
mod tests;
mod validate;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args as ClapArgs, CommandFactory, FromArgMatches, Parser};

use crate::disaggregation::DisaggregationMode;
use crate::faults::Faults;
use crate::kv_events::{KvEventsConfig, KvEventsError};
use crate::load_events::{LoadEndpoint, LoadEventsError};
use crate::params::{ParamsError, TimingParams};
use crate::ranks::RankChoice;
use crate::scheduler::{KvBudget, QueueOrder};
use crate::sglang_flags::{DEFAULT_SGLANG_VERSION, SglangFlags};

/// infera-sim: an emulated SGLang engine (`python -m sglang.launch_server` without a GPU).
#[derive(Parser, Debug, Clone)]
#[command(name = "infera-sim", version, about, long_about = None)]
pub struct SimArgs {
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    parallel: ParallelArgs,
    #[command(flatten)]
    scheduling: SchedulingArgs,
    #[command(flatten)]
    memory: memory::MemoryArgs,
    #[command(flatten)]
    ssl: ssl::SslArgs,
    #[command(flatten)]
    sim: SimOnlyArgs,
    /// SGLang flags this emulator does not model, dropped before parsing.
    #[arg(skip)]
    ignored: Vec<String>,
    /// Flags SGLang would reject, dropped before parsing (each with why).
    #[arg(skip)]
    rejected: Vec<String>,
    /// The command line after the program name, as given (`launch_command`).
    #[arg(skip)]
    launch: Vec<String>,
    /// The dropped SGLang flags as tokens (flag, then values).
    #[arg(skip)]
    inert_tokens: Vec<Vec<String>>,
}

#[derive(ClapArgs, Debug, Clone)]
#[command(next_help_heading = "SGLang server")]
struct ServerArgs {
    /// HTTP host to bind.
    #[arg(long, env = "INFERA_SIM_HOST", default_value = "127.0.0.1")]
    host: String,
    /// HTTP port (0 picks a free port).
    #[arg(long, env = "INFERA_SIM_PORT", default_value_t = 30000)]
    port: u16,
    /// The model path (only reported back).
    #[arg(long, env = "INFERA_SIM_MODEL_PATH")]
    model_path: String,
    /// The model name served (default: the model path).
    #[arg(long, env = "INFERA_SIM_SERVED_MODEL_NAME")]
    served_model_name: Option<String>,
    /// PD role.
    #[arg(long, env = "INFERA_SIM_DISAGGREGATION_MODE", value_enum, default_value_t = DisaggregationMode::Null)]
    disaggregation_mode: DisaggregationMode,
    /// The prefill's bootstrap port (0 picks a free port).
    #[arg(long, env = "INFERA_SIM_DISAGGREGATION_BOOTSTRAP_PORT", default_value_t = 8998)]
    disaggregation_bootstrap_port: u16,
    /// `tokenizer.json`, or a directory holding it (default: the model path, when it is such a
    /// directory). With one, prompts are tokenized as SGLang does them (chat template from
    /// `tokenizer_config.json` or `--chat-template`); without, one token per 4 bytes of text.
    #[arg(long, env = "INFERA_SIM_TOKENIZER_PATH")]
    tokenizer_path: Option<PathBuf>,
    /// A chat template file, over the tokenizer's own.
    #[arg(long, env = "INFERA_SIM_CHAT_TEMPLATE")]
    chat_template: Option<PathBuf>,
    /// Report cached prompt tokens in OpenAI usage (`prompt_tokens_details.cached_tokens`).
    #[arg(long, env = "INFERA_SIM_ENABLE_CACHE_REPORT")]
    enable_cache_report: bool,
    /// KV events config (JSON, SGLang's keys); `"publisher": "zmq"` publishes real KV events.
    #[arg(long, env = "INFERA_SIM_KV_EVENTS_CONFIG")]
    kv_events_config: Option<String>,
    /// Each rank publishes its load on its own ZMQ PUB socket (SGLang 0.5.19+): `auto` (after
    /// the KV-event ports), `tcp://host:port` (rank 0's; port 0 picks one), or `off`.
    #[arg(long, env = "INFERA_SIM_LOAD_PUBLISH_ENDPOINT")]
    load_publish_endpoint: Option<String>,
    /// Accepted; the emulator always serves its load endpoints.
    #[arg(long, env = "INFERA_SIM_ENABLE_METRICS")]
    enable_metrics: bool,
    /// Context length (default: the model directory's `config.json`, else the default model's).
    #[arg(long, env = "INFERA_SIM_CONTEXT_LENGTH")]
    context_length: Option<u32>,
    /// Serve the model as an embedding model: `/v1/embeddings` and `/v1/classify` answer, the
    /// generation routes refuse.
    #[arg(long, env = "INFERA_SIM_IS_EMBEDDING")]
    is_embedding: bool,
}

#[derive(ClapArgs, Debug, Clone)]
#[command(next_help_heading = "SGLang parallelism")]
struct ParallelArgs {
    /// Data-parallel size (ranks, unless `--attn-dp-size` is given).
    #[arg(long, env = "INFERA_SIM_DP_SIZE", default_value_t = 1)]
    dp_size: u32,
    /// Attention-DP ranks (SGLang 0.5.22+).
    #[arg(long, env = "INFERA_SIM_ATTN_DP_SIZE")]
    attn_dp_size: Option<u32>,
    /// DP attention over `--dp-size` ranks (deprecated in SGLang 0.5.22).
    #[arg(long, env = "INFERA_SIM_ENABLE_DP_ATTENTION")]
    enable_dp_attention: bool,
    /// Tensor-parallel size (only reported back).
    #[arg(long, env = "INFERA_SIM_TP_SIZE", default_value_t = 1)]
    tp_size: u32,
    /// Tokens per KV page (prefix-cache granularity).
    #[arg(long, env = "INFERA_SIM_PAGE_SIZE", default_value_t = 1)]
    page_size: u32,
}

#[derive(ClapArgs, Debug, Clone)]
#[command(next_help_heading = "SGLang scheduling")]
struct SchedulingArgs {
    /// DP rank choice without `routed_dp_rank`: auto (prefill: follow_bootstrap_room; otherwise
    /// round_robin), follow_bootstrap_room, round_robin; others act as round_robin.
    #[arg(long, env = "INFERA_SIM_LOAD_BALANCE_METHOD", default_value = "auto")]
    load_balance_method: String,
    /// Prefill queue order: fcfs, shortest-prefill-first; others act as fcfs.
    #[arg(long, env = "INFERA_SIM_SCHEDULE_POLICY", default_value = "fcfs")]
    schedule_policy: String,
    /// Most new tokens in one prefill chunk (≤ 0: no chunking).
    #[arg(
        long,
        env = "INFERA_SIM_CHUNKED_PREFILL_SIZE",
        default_value_t = 8192,
        allow_negative_numbers = true
    )]
    chunked_prefill_size: i64,
    /// Speculative decoding algorithm (reported back; acceptance comes from the timing params).
    #[arg(long, env = "INFERA_SIM_SPECULATIVE_ALGORITHM")]
    speculative_algorithm: Option<String>,
    /// Reported back.
    #[arg(long, env = "INFERA_SIM_SPECULATIVE_NUM_STEPS")]
    speculative_num_steps: Option<u32>,
    /// Reported back.
    #[arg(long, env = "INFERA_SIM_SPECULATIVE_EAGLE_TOPK")]
    speculative_eagle_topk: Option<u32>,
    /// Reported back.
    #[arg(long, env = "INFERA_SIM_SPECULATIVE_NUM_DRAFT_TOKENS")]
    speculative_num_draft_tokens: Option<u32>,
    /// Reported back.
    #[arg(long, env = "INFERA_SIM_CUDA_GRAPH_MAX_BS_DECODE")]
    cuda_graph_max_bs_decode: Option<u32>,
    /// Requests the worker runs at most (per DP rank: split over attention-DP ranks; default
    /// from the KV pool, as SGLang resolves it). Reported only.
    #[arg(long, env = "INFERA_SIM_MAX_RUNNING_REQUESTS")]
    max_running_requests: Option<u32>,
}

#[derive(ClapArgs, Debug, Clone)]
#[command(next_help_heading = "Emulator")]
struct SimOnlyArgs {
    /// Seed for request ids and output text; unset = from the OS. Alias `--seed` (SGLang has
    /// no such flag: its sampling seed is `--random-seed`).
    #[arg(long, visible_alias = "seed", env = "INFERA_SIM_SEED")]
    sim_seed: Option<u64>,
    /// Time compression: every modeled duration is divided by this. Alias `--speedup`.
    #[arg(long, visible_alias = "speedup", env = "INFERA_SIM_SPEEDUP", default_value_t = 1.0)]
    sim_speedup: f64,
    /// TOML file overriding timing parameters (see the manual).
    #[arg(long, env = "INFERA_SIM_PARAMS")]
    sim_params: Option<PathBuf>,
    /// The SGLang version the emulator reports and mimics.
    #[arg(long, env = "INFERA_SIM_SGLANG_VERSION", default_value = DEFAULT_SGLANG_VERSION)]
    sim_sglang_version: String,
    /// Bootstrap / waiting timeout of a PD request, model ms (SGLang: 300 s); divided by the
    /// speedup like every other modeled duration.
    #[arg(long, env = "INFERA_SIM_BOOTSTRAP_TIMEOUT_MS", default_value_t = 300_000)]
    sim_bootstrap_timeout_ms: u64,
    /// Fault: the next N data-plane requests fail at once with 500.
    #[arg(long, env = "INFERA_SIM_FAIL_NEXT", default_value_t = 0)]
    sim_fail_next: u32,
    /// Fault: every request stops emitting after K tokens and holds its connection.
    #[arg(long, env = "INFERA_SIM_STALL_AFTER_TOKENS")]
    sim_stall_after_tokens: Option<u32>,
    /// Fault: every request's connection is closed abruptly after K tokens.
    #[arg(long, env = "INFERA_SIM_DIE_AFTER_TOKENS")]
    sim_die_after_tokens: Option<u32>,
    /// Fault: a JSON object whose keys replace (`null`: remove) those of every `/server_info`
    /// answer, e.g. `{"dp_size": "eight"}` for a router's malformed-answer path.
    #[arg(long, env = "INFERA_SIM_SERVER_INFO_OVERRIDE")]
    sim_server_info_override: Option<String>,
    /// Log filter (tracing directives).
    #[arg(long, env = "INFERA_SIM_LOG", default_value = "info")]
    sim_log: String,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// HTTP host (the binary binds it).
    pub host: String,
    /// HTTP port.
    pub port: u16,
    /// `--model-path`.
    pub model_path: String,
    /// `--tokenizer-path`, else the model path: what `/model_info` reports as `tokenizer_path`
    /// (SGLang's `ServerArgs.tokenizer_path` defaults to the model path).
    pub tokenizer_path: String,
    /// The model id served.
    pub served_model_name: String,
    /// PD role.
    pub mode: DisaggregationMode,
    /// Own bootstrap port (`bootstrap_port: null` means this one).
    pub bootstrap_port: u16,
    /// DP ranks: `--attn-dp-size`, else `--dp-size`.
    pub ranks: u32,
    /// Whether the ranks are attention-DP ranks (reported in `/server_info`).
    pub attention_dp: bool,
    /// `--tp-size`.
    pub tp_size: u32,
    /// `--page-size`.
    pub page_size: u32,
    /// Prefill chunk in tokens.
    pub chunk_tokens: u32,
    /// Prefill queue order.
    pub queue_order: QueueOrder,
    /// `--schedule-policy` as given.
    pub schedule_policy: String,
    /// Rank choice without `routed_dp_rank`.
    pub rank_choice: RankChoice,
    /// `--load-balance-method` as given.
    pub load_balance_method: String,
    /// `--speculative-*` as given.
    pub speculative: Speculative,
    /// `--cuda-graph-max-bs-decode`.
    pub cuda_graph_max_bs_decode: Option<u32>,
    /// Requests one DP rank runs at most (`--max-running-requests`, resolved as SGLang does).
    pub max_running_requests: u32,
    /// `--max-running-requests` as given.
    pub max_running_requests_flag: Option<u32>,
    /// The context length: `--context-length`, else the model's.
    pub context_length: u32,
    /// `--context-length` as given.
    pub context_length_flag: Option<u32>,
    /// What the model directory's `config.json` says (or the default model).
    pub model: crate::model_config::ModelFacts,
    /// `--is-embedding` as given (`/server_info`'s `is_embedding`).
    pub is_embedding: bool,
    /// Each DP rank's KV pool, sized as SGLang sizes it.
    pub pool: crate::kv_pool::KvPool,
    /// `--max-total-tokens` as given.
    pub max_total_tokens_flag: Option<u64>,
    /// The pool as a budget, with `--num-reserved-decode-tokens` (enforced on a decode only).
    pub kv: KvBudget,
    /// SGLang flags the sim does not model, as tokens (`--flag`, values…), for `/server_info`.
    pub inert_flags: Vec<Vec<String>>,
    /// The command line after the program name (`launch_command`).
    pub launch_command: String,
    /// `--kv-events-config` as given.
    pub kv_events_config: Option<String>,
    /// HTTPS on the API (`--ssl-certfile`, `--ssl-keyfile`, `--ssl-ca-certs`).
    pub ssl: Option<infera_runtime::serve::tls::ServerFiles>,
    /// The tokenizer (`--tokenizer-path`, or a model path that is a tokenizer directory).
    pub tokenizer: Option<std::sync::Arc<infera_tokenize::Tokenizer>>,
    /// `--enable-cache-report`.
    pub cache_report: bool,
    /// `--kv-events-config`, parsed; `None` when unset or the `null` publisher.
    pub kv_events: Option<KvEventsConfig>,
    /// Where the ranks' load sockets go, when they publish.
    pub load_events: Option<LoadEndpoint>,
    /// `--enable-metrics`.
    pub enable_metrics: bool,
    /// RNG seed.
    pub seed: Option<u64>,
    /// Time compression factor (> 0).
    pub speedup: f64,
    /// Timing model parameters.
    pub params: TimingParams,
    /// Emulated SGLang version.
    pub sglang_version: String,
    /// PD bootstrap / waiting timeout, model time (SGLang's 300 s by default).
    pub bootstrap_timeout: Duration,
    /// Fault knobs at start.
    pub faults: Faults,
    /// `--sim-server-info-override`: keys that replace (`null`: remove) `/server_info`'s.
    pub server_info_override: serde_json::Map<String, serde_json::Value>,
    /// Log filter.
    pub log: String,
    /// Warnings to log at start (dropped flags, policies acting as others).
    pub warnings: Vec<String>,
}

/// `--speculative-*` as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Speculative {
    /// `--speculative-algorithm`.
    pub algorithm: Option<String>,
    /// `--speculative-num-steps`.
    pub num_steps: Option<u32>,
    /// `--speculative-eagle-topk`.
    pub eagle_topk: Option<u32>,
    /// `--speculative-num-draft-tokens`.
    pub num_draft_tokens: Option<u32>,
}

/// A configuration that cannot start (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--sim-params`.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// `--sim-speedup` not finite and > 0.
    #[error("--sim-speedup must be a finite number > 0 (got {0})")]
    Speedup(f64),
    /// `--kv-events-config`.
    #[error("--kv-events-config: {0}")]
    KvEvents(#[from] KvEventsError),
    /// `--load-publish-endpoint`.
    #[error(transparent)]
    LoadEvents(#[from] LoadEventsError),
    /// `--tokenizer-path` / `--chat-template`.
    #[error("--tokenizer-path: {0}")]
    Tokenizer(#[from] infera_tokenize::LoadError),
    /// `--sim-server-info-override` is not a JSON object.
    #[error("--sim-server-info-override must be a JSON object: {0}")]
    ServerInfoOverride(#[source] serde_json::Error),
    /// The KV pool cannot be sized (SGLang would not start).
    #[error(transparent)]
    Pool(#[from] crate::kv_pool::PoolError),
    /// A size that must be ≥ 1.
    #[error("--{flag} must be at least 1 (got {value})")]
    Size {
        /// The flag that was out of range.
        flag: &'static str,
        /// The value it was given.
        value: u32,
    },
}

impl SimArgs {
    /// Parses an SGLang command line (program name first), dropping unknown flags.
    pub fn parse_lenient<I, T>(argv: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let mut command = Self::command();
        let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
        let sglang = SglangFlags::for_version(&crate::argv::emulated_version(&argv));
        let launch: Vec<String> = argv.iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
        let stripped = crate::argv::strip_unknown(&command, &sglang, argv);
        let matches = command.try_get_matches_from_mut(stripped.kept)?;
        let mut args = Self::from_arg_matches(&matches)?;
        args.launch = launch;
        args.ignored = stripped.inert;
        args.inert_tokens = stripped.inert_tokens;
        let why = |f: String| format!("{f} ({} has no such flag)", sglang.source);
        args.rejected = stripped.rejected.into_iter().map(why).collect();
        Ok(args)
    }

    /// The SGLang flags dropped by [`SimArgs::parse_lenient`] that the emulator does not model.
    pub fn ignored_flags(&self) -> &[String] {
        &self.ignored
    }
}

impl SimConfig {
    /// Parses and validates an SGLang command line in one go (tests, embedding).
    pub fn from_argv<I, T>(argv: I) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        Ok(Self::try_from(SimArgs::parse_lenient(argv)?)?)
    }

    /// Whether the model generates (`/model_info`'s `is_generation`): not with `--is-embedding`,
    /// nor for an architecture SGLang always serves as a pooling model
    /// (`is_generation_model` in python/sglang/srt/configs/model_config.py). A model that does
    /// not generate answers `/v1/embeddings` and `/v1/classify`; one that does, the generation
    /// routes.
    pub fn generates(&self) -> bool {
        !self.is_embedding && !self.model.pooling_architecture()
    }

    /// How long a PD request waits for its peer on the wall clock: the model-time timeout
    /// compressed by the speedup, so a study at 10x times out where SGLang would.
    pub fn bootstrap_wait(&self) -> Duration {
        self.bootstrap_timeout.div_f64(self.speedup)
    }
}

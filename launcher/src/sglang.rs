//! A typed SGLang server command line ([`SglangArgs`]) and its rendering, one function per
//! flag group. Rendering is version-aware: the same typed value is spelled the way the
//! worker's SGLang version's argparse accepts it (SGLang 0.5.23
//! `python/sglang/srt/arg_groups/fields/*.py`, registered by `python/sglang/srt/server_args.py`;
//! SGLang 0.5.18 `python/sglang/srt/server_args.py`). Flags are always emitted in full, since
//! argparse prefix-matching makes abbreviations break across releases.

mod choices;

use serde::Deserialize;

pub use self::choices::{HiCacheWritePolicy, SchedulePolicy, SpeculativeAlgorithm, TransferBackend};
use crate::version::SglangVersion;

/// One worker's SGLang arguments, grouped as SGLang groups them.
#[derive(Clone, Debug, PartialEq)]
pub struct SglangArgs {
    /// Decides the spelling of several flags.
    pub version: SglangVersion,
    /// Model, address, metrics.
    pub server: Server,
    /// TP / PP / DP / attention DP.
    pub parallel: Parallel,
    /// PD role and KV transfer; `None` for a mixed worker.
    pub disaggregation: Option<Disaggregation>,
    /// Prefill chunking, queue order, memory.
    pub scheduling: Scheduling,
    /// CUDA graphs and all-reduce.
    pub graphs: Graphs,
    /// Hierarchical cache (host-memory KV tier).
    pub hicache: Option<HiCache>,
    /// Speculative decoding.
    pub speculative: Option<Speculative>,
    /// KV-event publishing.
    pub kv_events: Option<KvEvents>,
    /// The per-rank load socket (needs `kv_events`; rendered only where the version has it).
    pub load_events: Option<LoadEvents>,
    /// Passed through verbatim, last.
    pub extra: Vec<String>,
}

/// Model and server address.
#[derive(Clone, Debug, PartialEq)]
pub struct Server {
    /// `--model-path`.
    pub model_path: String,
    /// `--served-model-name`.
    pub served_model_name: Option<String>,
    /// `--host`.
    pub host: String,
    /// `--port`.
    pub port: u16,
    /// `--trust-remote-code`.
    pub trust_remote_code: bool,
    /// `--context-length`.
    pub context_length: Option<u32>,
    /// `--page-size`.
    pub page_size: Option<u32>,
    /// `--enable-metrics`.
    pub enable_metrics: bool,
}

/// Parallelism. GPUs used = `tp × pp × dp`; attention-DP ranks split each TP group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallel {
    /// Tensor parallel size.
    pub tp: u32,
    /// Pipeline parallel size.
    pub pp: u32,
    /// Data-parallel replicas.
    pub dp: u32,
    /// Attention-DP ranks inside each TP group (1 = off).
    pub attn_dp: u32,
}

impl Parallel {
    /// GPUs one worker occupies.
    pub fn gpus(self) -> u32 {
        self.tp * self.pp * self.dp
    }

    /// Schedulers (DP ranks) behind the worker's one HTTP port.
    pub fn dp_ranks(self) -> u32 {
        self.dp * self.attn_dp
    }
}

/// The PD side of a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Disaggregation {
    /// Prefill or decode.
    pub mode: DisaggregationMode,
    /// `--disaggregation-bootstrap-port` (prefill only).
    pub bootstrap_port: Option<u16>,
    /// `--disaggregation-transfer-backend`.
    pub backend: Option<TransferBackend>,
    /// `--disaggregation-ib-device`, comma-joined.
    pub ib_devices: Vec<String>,
}

/// `--disaggregation-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisaggregationMode {
    /// `prefill`: computes the prompt's KV and sends it to a decode worker.
    Prefill,
    /// `decode`: receives the KV and generates.
    Decode,
}

/// Scheduling and memory.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Scheduling {
    /// `--chunked-prefill-size` (-1 disables chunking).
    pub chunked_prefill_size: Option<i64>,
    /// `--schedule-policy`.
    pub schedule_policy: Option<SchedulePolicy>,
    /// `--mem-fraction-static`.
    pub mem_fraction_static: Option<f64>,
    /// `--max-running-requests`.
    pub max_running_requests: Option<u32>,
    /// `--disable-overlap-schedule`.
    pub disable_overlap_schedule: bool,
}

/// CUDA graphs and all-reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Graphs {
    /// Largest decode batch captured in a CUDA graph (`--cuda-graph-max-bs[-decode]`).
    pub max_bs_decode: Option<u32>,
    /// `--cuda-graph-max-bs-prefill`.
    pub max_bs_prefill: Option<u32>,
    /// `--disable-custom-all-reduce`.
    pub disable_custom_all_reduce: bool,
}

/// Hierarchical cache settings (`--enable-hierarchical-cache` and `--hicache-*`).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HiCache {
    /// `--hicache-size`: host pool in GB (overrides the ratio).
    pub size_gb: Option<u32>,
    /// `--hicache-ratio`: host pool / device pool.
    pub ratio: Option<f64>,
    /// `--hicache-write-policy`.
    pub write_policy: Option<HiCacheWritePolicy>,
}

/// Speculative decoding (EAGLE / MTP).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    /// `--speculative-algorithm`.
    pub algorithm: SpeculativeAlgorithm,
    /// `--speculative-num-steps`.
    pub num_steps: u32,
    /// `--speculative-eagle-topk`.
    pub eagle_topk: u32,
    /// `--speculative-num-draft-tokens`.
    pub num_draft_tokens: u32,
    /// `--speculative-draft-model-path` (MTP models carry their draft layer: leave unset).
    pub draft_model_path: Option<String>,
}

/// KV-event publishing: one ZMQ PUB socket per DP rank from `port`, replay sockets from
/// `replay_port` (SGLang offsets both by the rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEvents {
    /// PUB port of rank 0.
    pub port: u16,
    /// ROUTER (replay) port of rank 0.
    pub replay_port: u16,
    /// First frame of every message.
    pub topic: String,
}

/// The load PUB sockets (`--load-publish-endpoint tcp://*:port`): rank `r` binds `port + r`
/// and publishes its `LoadStat` (SGLang 0.5.23
/// `python/sglang/srt/managers/scheduler_components/load_publisher.py`). An explicit address
/// rather than `auto`, so the worker record names the port the command line sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadEvents {
    /// PUB port of rank 0.
    pub port: u16,
}

impl KvEvents {
    /// The `--kv-events-config` JSON.
    pub fn config_json(&self) -> String {
        // A struct, not a JSON map: its key order is the declaration order, whatever map type
        // serde_json was built with (another crate of the workspace turns on preserve_order).
        #[derive(serde::Serialize)]
        struct Config<'a> {
            publisher: &'a str,
            endpoint: String,
            replay_endpoint: String,
            topic: &'a str,
        }
        let config = Config {
            publisher: "zmq",
            endpoint: format!("tcp://*:{}", self.port),
            replay_endpoint: format!("tcp://*:{}", self.replay_port),
            topic: &self.topic,
        };
        serde_json::to_string(&config).expect("a plain struct serialises")
    }
}

impl SglangArgs {
    /// Rank 0's load PUB port, when the worker publishes its load: asked for, with KV events
    /// (SGLang advertises the load range inside their `/server_info` block and refuses to start
    /// without them), and a version that has `--load-publish-endpoint`.
    pub fn load_publish_port(&self) -> Option<u16> {
        let on = self.kv_events.is_some() && self.version.has_load_publish_endpoint();
        self.load_events.filter(|_| on).map(|l| l.port)
    }

    /// The command line after the program (`python -m sglang.launch_server` or `infera-sim`).
    pub fn render(&self) -> Vec<String> {
        let mut out = Argv::default();
        render_server(&self.server, &mut out);
        render_parallel(self.parallel, self.version, &mut out);
        if let Some(d) = &self.disaggregation {
            render_disaggregation(d, &mut out);
        }
        render_scheduling(&self.scheduling, &mut out);
        render_graphs(self.graphs, self.version, &mut out);
        if let Some(h) = &self.hicache {
            render_hicache(h, &mut out);
        }
        if let Some(s) = &self.speculative {
            render_speculative(s, &mut out);
        }
        if let Some(k) = &self.kv_events {
            out.value("--kv-events-config", k.config_json());
        }
        if let Some(port) = self.load_publish_port() {
            out.value("--load-publish-endpoint", format!("tcp://*:{port}"));
        }
        out.0.extend(self.extra.iter().cloned());
        out.0
    }
}

/// The argv being built.
#[derive(Default)]
struct Argv(Vec<String>);

impl Argv {
    fn flag(&mut self, name: &str) {
        self.0.push(name.to_owned());
    }

    fn value(&mut self, name: &str, value: impl ToString) {
        self.0.push(name.to_owned());
        self.0.push(value.to_string());
    }

    fn maybe(&mut self, name: &str, value: Option<impl ToString>) {
        if let Some(v) = value {
            self.value(name, v);
        }
    }

    fn switch(&mut self, name: &str, on: bool) {
        if on {
            self.flag(name);
        }
    }
}

fn render_server(s: &Server, out: &mut Argv) {
    out.value("--model-path", &s.model_path);
    out.maybe("--served-model-name", s.served_model_name.as_ref());
    out.value("--host", &s.host);
    out.value("--port", s.port);
    out.switch("--trust-remote-code", s.trust_remote_code);
    out.maybe("--context-length", s.context_length);
    out.maybe("--page-size", s.page_size);
    out.switch("--enable-metrics", s.enable_metrics);
}

/// `--tp-size`, `--pp-size`, and DP: before 0.5.22 attention DP is `--dp-size N
/// --enable-dp-attention` (so it cannot be combined with replicas); from 0.5.22 it is
/// `--attn-dp-size N` and `--dp-size` counts replicas.
fn render_parallel(p: Parallel, version: SglangVersion, out: &mut Argv) {
    out.value("--tp-size", p.tp);
    if p.pp > 1 {
        out.value("--pp-size", p.pp);
    }
    if version.has_attn_dp_size() {
        if p.dp > 1 {
            out.value("--dp-size", p.dp);
        }
        if p.attn_dp > 1 {
            out.value("--attn-dp-size", p.attn_dp);
        }
    } else if p.attn_dp > 1 {
        out.value("--dp-size", p.attn_dp);
        out.flag("--enable-dp-attention");
    } else if p.dp > 1 {
        out.value("--dp-size", p.dp);
    }
}

fn render_disaggregation(d: &Disaggregation, out: &mut Argv) {
    let mode = match d.mode {
        DisaggregationMode::Prefill => "prefill",
        DisaggregationMode::Decode => "decode",
    };
    out.value("--disaggregation-mode", mode);
    out.maybe("--disaggregation-bootstrap-port", d.bootstrap_port);
    out.maybe("--disaggregation-transfer-backend", d.backend.map(TransferBackend::as_str));
    if !d.ib_devices.is_empty() {
        out.value("--disaggregation-ib-device", d.ib_devices.join(","));
    }
}

fn render_scheduling(s: &Scheduling, out: &mut Argv) {
    out.maybe("--chunked-prefill-size", s.chunked_prefill_size);
    out.maybe("--schedule-policy", s.schedule_policy.map(SchedulePolicy::as_str));
    out.maybe("--mem-fraction-static", s.mem_fraction_static);
    out.maybe("--max-running-requests", s.max_running_requests);
    out.switch("--disable-overlap-schedule", s.disable_overlap_schedule);
}

/// `--cuda-graph-max-bs` is the exact flag before 0.5.20; from then on only the split
/// `--cuda-graph-max-bs-decode` / `-prefill` exist and the old spelling is ambiguous.
fn render_graphs(g: Graphs, version: SglangVersion, out: &mut Argv) {
    let decode_flag = if version.has_exact_cuda_graph_max_bs() {
        "--cuda-graph-max-bs"
    } else {
        "--cuda-graph-max-bs-decode"
    };
    out.maybe(decode_flag, g.max_bs_decode);
    out.maybe("--cuda-graph-max-bs-prefill", g.max_bs_prefill);
    out.switch("--disable-custom-all-reduce", g.disable_custom_all_reduce);
}

fn render_hicache(h: &HiCache, out: &mut Argv) {
    out.flag("--enable-hierarchical-cache");
    out.maybe("--hicache-size", h.size_gb);
    out.maybe("--hicache-ratio", h.ratio);
    out.maybe("--hicache-write-policy", h.write_policy.map(HiCacheWritePolicy::as_str));
}

fn render_speculative(s: &Speculative, out: &mut Argv) {
    out.value("--speculative-algorithm", s.algorithm.as_str());
    out.value("--speculative-num-steps", s.num_steps);
    out.value("--speculative-eagle-topk", s.eagle_topk);
    out.value("--speculative-num-draft-tokens", s.num_draft_tokens);
    out.maybe("--speculative-draft-model-path", s.draft_model_path.as_ref());
}

/// Flags the typed builder owns: a deployment's `extra_args` may not repeat them (nor the
/// removed `--cuda-graph-max-bs`, which the builder spells per version).
pub const OWNED_FLAGS: &[&str] = &[
    "--model-path",
    "--served-model-name",
    "--host",
    "--port",
    "--trust-remote-code",
    "--context-length",
    "--page-size",
    "--enable-metrics",
    "--tp-size",
    "--tensor-parallel-size",
    "--pp-size",
    "--pipeline-parallel-size",
    "--dp-size",
    "--data-parallel-size",
    "--attn-dp-size",
    "--attention-data-parallel-size",
    "--enable-dp-attention",
    "--disaggregation-mode",
    "--disaggregation-bootstrap-port",
    "--disaggregation-transfer-backend",
    "--disaggregation-ib-device",
    "--chunked-prefill-size",
    "--schedule-policy",
    "--mem-fraction-static",
    "--max-running-requests",
    "--disable-overlap-schedule",
    "--cuda-graph-max-bs",
    "--cuda-graph-max-bs-decode",
    "--cuda-graph-max-bs-prefill",
    "--disable-custom-all-reduce",
    "--enable-hierarchical-cache",
    "--enable-hicache",
    "--hicache-size",
    "--hicache-ratio",
    "--hicache-write-policy",
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-draft-model-path",
    "--kv-events-config",
    "--load-publish-endpoint",
];

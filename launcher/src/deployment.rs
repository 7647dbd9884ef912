//! The deployment file (TOML): what to run, where, and how. Parsing only; the cross-field rules
//! are the checker's (`launcher/src/check.rs`), which reads these types. Every table rejects
//! unknown keys, so a misspelt key is an error naming its line. The fields the checker's messages
//! name keep their spans.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::sglang::{HiCache, SchedulePolicy, Speculative, TransferBackend};

/// A parsed deployment file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentFile {
    /// `sglang` (`python -m sglang.launch_server`) or `sim` (`infera-sim`, same argv).
    pub engine: Engine,
    /// The SGLang version the workers run (decides flag spellings). Unset: asked of `python`
    /// (engine `sglang`), or the newest supported release (engine `sim`).
    pub sglang_version: Option<Spanned<String>>,
    /// Which variable makes a worker's GPUs visible.
    #[serde(default)]
    pub platform: Platform,
    /// The Python interpreter that runs `-m sglang.launch_server` (engine `sglang`).
    #[serde(default = "default_python")]
    pub python: Spanned<String>,
    /// `[model]`: what every worker serves.
    pub model: ModelSection,
    /// KV transfer between prefill and decode (PD only).
    pub transfer: Option<Spanned<TransferSection>>,
    /// Environment for every worker.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Prefill workers.
    pub prefill: Option<Spanned<RoleSection>>,
    /// Decode workers.
    pub decode: Option<Spanned<RoleSection>>,
    /// Aggregated workers.
    pub mixed: Option<Spanned<RoleSection>>,
    /// Control and proxy settings.
    pub router: Option<RouterSection>,
}

fn default_python() -> Spanned<String> {
    Spanned::new(0..0, "python3".to_owned())
}

/// What runs the workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// `python -m sglang.launch_server`.
    Sglang,
    /// `infera-sim`, the emulated engine.
    Sim,
}

/// GPU visibility.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// NVIDIA: `CUDA_VISIBLE_DEVICES`.
    #[default]
    Cuda,
    /// AMD: `HIP_VISIBLE_DEVICES`.
    Rocm,
}

impl Platform {
    /// The variable listing a worker's GPUs.
    pub fn visible_devices_var(self) -> &'static str {
        match self {
            Self::Cuda => "CUDA_VISIBLE_DEVICES",
            Self::Rocm => "HIP_VISIBLE_DEVICES",
        }
    }
}

/// `[model]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// `--model-path`.
    pub path: String,
    /// `--served-model-name` (what clients ask for).
    pub served_name: Option<String>,
    /// Hidden layers of the target model (checks `pp_layers`).
    pub num_layers: Option<Spanned<u32>>,
    /// `--trust-remote-code`.
    #[serde(default)]
    pub trust_remote_code: bool,
    /// `--context-length`.
    pub context_length: Option<u32>,
    /// `--page-size`.
    pub page_size: Option<u32>,
}

/// `[transfer]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferSection {
    /// `--disaggregation-transfer-backend`.
    pub backend: TransferBackend,
    /// `--disaggregation-ib-device`: the RDMA devices (rails) to use.
    #[serde(default)]
    pub devices: Vec<String>,
}

/// `[prefill]`, `[decode]`, `[mixed]`: engine settings shared by the role's workers, and the
/// workers themselves (`[[ROLE.workers]]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSection {
    /// Tensor parallel size.
    #[serde(default = "one")]
    pub tp: Spanned<u32>,
    /// Pipeline parallel size.
    #[serde(default = "one")]
    pub pp: Spanned<u32>,
    /// Data-parallel replicas.
    #[serde(default = "one")]
    pub dp: Spanned<u32>,
    /// Attention-DP ranks per TP group (1 = off).
    #[serde(default = "one")]
    pub attn_dp: Spanned<u32>,
    /// Layers per pipeline stage (`SGLANG_PP_LAYER_PARTITION`); must sum to `model.num_layers`.
    pub pp_layers: Option<Spanned<Vec<u32>>>,
    /// `--chunked-prefill-size` (-1 disables chunking).
    pub chunked_prefill_size: Option<Spanned<i64>>,
    /// `--schedule-policy`.
    pub schedule_policy: Option<Spanned<SchedulePolicy>>,
    /// `--mem-fraction-static`, in (0, 1).
    pub mem_fraction_static: Option<Spanned<f64>>,
    /// `--max-running-requests`.
    pub max_running_requests: Option<u32>,
    /// Largest decode batch in a CUDA graph (spelled per version).
    pub cuda_graph_max_bs: Option<u32>,
    /// `--cuda-graph-max-bs-prefill`.
    pub cuda_graph_max_bs_prefill: Option<u32>,
    /// `--disable-custom-all-reduce`.
    #[serde(default)]
    pub disable_custom_all_reduce: bool,
    /// `--disable-overlap-schedule`.
    #[serde(default)]
    pub disable_overlap_schedule: bool,
    /// `--enable-metrics`.
    #[serde(default)]
    pub enable_metrics: bool,
    /// `[ROLE.hicache]`.
    pub hicache: Option<HiCache>,
    /// `[ROLE.speculative]`; a decode's is mirrored onto prefills that set none.
    pub speculative: Option<Spanned<Speculative>>,
    /// Further SGLang flags, verbatim (not the ones the typed keys own).
    #[serde(default = "empty")]
    pub extra_args: Spanned<Vec<String>>,
    /// Environment for the role's workers.
    #[serde(default = "empty")]
    pub env: Spanned<BTreeMap<String, String>>,
    /// `[[ROLE.workers]]`: the role's workers, each placed on a host and GPUs.
    #[serde(default)]
    pub workers: Vec<Spanned<Placement>>,
}

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

fn empty<T: Default>() -> Spanned<T> {
    Spanned::new(0..0, T::default())
}

/// `[[ROLE.workers]]`: one worker, where it runs and its ports.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Unique in the deployment.
    pub name: Spanned<String>,
    /// The node's address (`--host`; also what the worker is reached at).
    #[serde(default = "default_host")]
    pub host: String,
    /// GPU ids on that node (`tp × pp × dp` of them).
    pub gpus: Spanned<Vec<u32>>,
    /// HTTP port.
    pub port: Spanned<u16>,
    /// PD bootstrap port (prefill only; SGLang's default 8998).
    pub bootstrap_port: Option<Spanned<u16>>,
    /// KV events: PUB ports from here, one per DP rank; replay ports follow them.
    pub kv_events_port: Option<Spanned<u16>>,
    /// Each rank also publishes its load (`--load-publish-endpoint`) on the ports after the
    /// replay ports; needs `kv_events_port`; left out of the argv on versions without the flag
    /// (before 0.5.23).
    pub load_events: Option<Spanned<bool>>,
    /// Environment for this worker.
    #[serde(default = "empty")]
    pub env: Spanned<BTreeMap<String, String>>,
}

fn default_host() -> String {
    "127.0.0.1".to_owned()
}

/// `[router]`: flags for `infera-control` and the proxies, forwarded only when given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSection {
    /// `--listen` of control.
    pub listen: Option<String>,
    /// `--metrics-listen` of control.
    pub metrics_listen: Option<String>,
    /// `--admin-listen` of control: the Admin service on an address of its own.
    pub admin_listen: Option<Spanned<String>>,
    /// `--decode-input-demand` (off, shadow, on).
    pub decode_input_demand: Option<Spanned<String>>,
    /// `--decode-request-weight` W (needs demand shadow or on when > 0), or `"auto"`.
    pub decode_request_weight: Option<Spanned<WeightSetting>>,
    /// `--decode-request-weight-fallback`: W while `auto` has no trusted fit.
    pub decode_request_weight_fallback: Option<Spanned<f64>>,
    /// `--decode-weight-fit-half-life-ms` of `auto`'s fit.
    pub decode_weight_fit_half_life_ms: Option<Spanned<u64>>,
    /// `--decode-policy`.
    pub decode_policy: Option<Spanned<String>>,
    /// `--prefill-policy` (cache-aware, round-robin).
    pub prefill_policy: Option<Spanned<String>>,
    /// `--prefill-overlap-credit`, 0 – 100.
    pub prefill_overlap_credit: Option<Spanned<f64>>,
    /// `--prefill-session-slack-tokens`.
    pub prefill_session_slack_tokens: Option<u64>,
    /// `--session-ttl-ms`.
    pub session_ttl_ms: Option<Spanned<u64>>,
    /// `--kv-index-max-blocks`.
    pub kv_index_max_blocks: Option<Spanned<u64>>,
    /// `--lease-ttl-ms` of control and of each proxy.
    pub lease_ttl_ms: Option<Spanned<u64>>,
    /// `--listen` of each proxy.
    #[serde(default)]
    pub proxies: Vec<String>,
    /// `--tokenizer` of each proxy (the model's `tokenizer.json`).
    pub tokenizer: Option<String>,
    /// `--chat-template` of each proxy (needs `tokenizer`).
    pub chat_template: Option<Spanned<String>>,
    /// `[router.tls]`: control's gRPC over TLS, and the proxies' side of it.
    pub tls: Option<RouterTls>,
    /// `[router.etcd]`: control's own access to a secured etcd.
    pub etcd: Option<RouterEtcd>,
}

/// `[router.etcd]`: how the control `up` starts reaches a secured etcd, as its `--etcd-*` flags
/// (manual/operations/etcd.md). Without it control gets the launcher's own `--etcd-*` flags; with
/// it, these (the CA defaults to the launcher's `--etcd-ca`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterEtcd {
    /// Control's `--etcd-ca`.
    pub ca: Option<String>,
    /// Control's `--etcd-cert` (its common name is control's etcd user without `user`).
    pub cert: Option<Spanned<String>>,
    /// Control's `--etcd-key`.
    pub key: Option<Spanned<String>>,
    /// Control's `--etcd-user`.
    pub user: Option<Spanned<String>>,
    /// Control's `--etcd-password-file`.
    pub password_file: Option<Spanned<String>>,
}

/// `router.decode_request_weight`: a number, or `"auto"` (any case, as control reads it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WeightSetting {
    /// A pinned W.
    Pinned(f64),
    /// W fitted from the engines' step times.
    Auto,
}

impl WeightSetting {
    /// The flag's value, as control parses it.
    pub fn flag_value(&self) -> String {
        match self {
            Self::Pinned(w) => w.to_string(),
            Self::Auto => "auto".to_owned(),
        }
    }
}

impl<'de> Deserialize<'de> for WeightSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WeightSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number or \"auto\"")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<WeightSetting, E> {
                Ok(WeightSetting::Pinned(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<WeightSetting, E> {
                Ok(WeightSetting::Pinned(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<WeightSetting, E> {
                Ok(WeightSetting::Pinned(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<WeightSetting, E> {
                if v.trim().eq_ignore_ascii_case("auto") {
                    Ok(WeightSetting::Auto)
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(v), &self))
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `[router.tls]`: PEM files, each forwarded as the flag it names (manual/operations/security.md).
/// With `cert`, `up` reaches control at `https://`; with `proxy_cert`, the proxies serve HTTPS.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterTls {
    /// Control's `--tls-cert` (it must name 127.0.0.1, or give `server_name`).
    pub cert: Option<Spanned<String>>,
    /// Control's `--tls-key`.
    pub key: Option<Spanned<String>>,
    /// Control's `--tls-client-ca`: callers must show a certificate this CA signed.
    pub client_ca: Option<String>,
    /// The proxies' `--control-ca`: the CA that verifies control.
    pub ca: Option<String>,
    /// The proxies' `--control-cert` (their client certificate, with `client_ca`).
    pub client_cert: Option<Spanned<String>>,
    /// The proxies' `--control-key`.
    pub client_key: Option<Spanned<String>>,
    /// The proxies' `--control-server-name`: the name to verify in control's certificate.
    pub server_name: Option<String>,
    /// The proxies' `--tls-cert` (HTTPS on their listeners).
    pub proxy_cert: Option<Spanned<String>>,
    /// The proxies' `--tls-key`.
    pub proxy_key: Option<Spanned<String>>,
}

/// A file that cannot be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read the deployment file {path}: {source}", path = path.display())]
    Read {
        /// The deployment file given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or not this format (unknown key, wrong type, missing key).
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// The deployment file given.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// toml's message (names the key).
        message: String,
    },
}

/// Reads and parses a deployment file.
pub fn load(path: &Path) -> Result<(DeploymentFile, String), LoadError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: path.to_owned(), source })?;
    let file = parse(path, &text)?;
    Ok((file, text))
}

/// Parses deployment text (`path` only names it in errors).
pub fn parse(path: &Path, text: &str) -> Result<DeploymentFile, LoadError> {
    toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((0, 0), |s| line_column(text, s.start));
        LoadError::Parse { path: path.to_owned(), line, column, message: e.message().trim().to_owned() }
    })
}

/// 1-based line and column of a byte offset.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

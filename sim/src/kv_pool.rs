//! A worker's KV pool, sized as SGLang 0.5.23 sizes it, so every worker knows its capacity
//! (`max_total_num_tokens`) and reports a `token_usage` in [0, 1].
//!
//! SGLang (`python/sglang/srt/mem_cache/kv_cache_configurator.py`, `_profile_available_bytes`,
//! `config_from_budget`, `_apply_token_constraints`, `resolve_max_num_reqs`;
//! `python/sglang/srt/model_executor/pool_configurator.py`, `DefaultPoolConfigurator`):
//!
//! ```text
//! rest   = free − weights − free × (1 − mem_fraction_static)        GiB; free = device memory before load
//! cell   = bytes per token over the worker's layers (+ the draft's under EAGLE)
//! tokens = ⌊rest × 2³⁰ / cell⌋, page-aligned; then min(tokens, --max-total-tokens)
//! ```
//!
//! The model and device are parameters ([`ModelParams`], [`DeviceParams`], `--sim-params`
//! tables `[model]` and `[device]`); their defaults describe one GPU of the original study's decode, GLM-5.2
//! MXFP4 on an MI355X with TP8 and DP attention (`manual/reference/sim.md` shows the
//! arithmetic). The weights are a per-GPU figure: the sim does not re-shard them by
//! `--tp-size`.

pub mod mem_fraction;

use serde::Deserialize;

use crate::disaggregation::DisaggregationMode;
pub use mem_fraction::MemFractionInputs;

/// Bytes in a GiB (SGLang counts device memory in GiB and calls it GB).
const GIB: f64 = (1u64 << 30) as f64;

/// The served model as the pool sees it. Defaults: GLM-5.2 (the architecture of GLM-5,
/// `GlmMoeDsaForCausalLM`: 78 layers, MLA with a DSA indexer, one NextN layer), MXFP4 experts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelParams {
    /// Context length when `--context-length` is not given and the model path holds no
    /// `config.json`: 1,048,576. An assumption: the original study served AgentX traces with prompts up
    /// to 894 k tokens on the kit's GLM-5.2 (GLM-5 itself has 202,752), and 2²⁰ is the GLM
    /// line's 1 M window (transformers' `Glm5NextConfig.max_position_embeddings`).
    pub context_length: u32,
    /// Layers whose KV the worker holds: 78.
    pub layers: u32,
    /// KV bytes per token and layer: MLA's `kv_lora_rank + qk_rope_head_dim` = 512 + 64 values
    /// × 2 bytes (SGLang keeps a DSA model's KV in bf16 on a device below compute capability
    /// 10, which an MI355X reports as 9.5) = 1,152.
    pub kv_bytes_per_token_layer: u32,
    /// DSA indexer bytes per token and layer: `index_head_dim` 128 fp8 values + 128 / 128 × 4
    /// scale bytes = 132 (`_compute_dsa_indexer_cell_size`).
    pub indexer_bytes_per_token_layer: u32,
    /// Draft layers whose KV is added under EAGLE-style speculation (the NextN layer): 1.
    pub draft_layers: u32,
    /// Weights resident on one GPU, GiB: 71.76 for the kit's TP8 + DP-attention decode (MXFP4
    /// experts, embeddings and LM head split over 8 GPUs; bf16 attention on every GPU).
    pub weights_gib_per_gpu: f64,
    /// `model_type` reported by `/model_info` when the model path holds no `config.json`.
    pub model_type: String,
    /// `architectures` reported by `/model_info` when the model path holds no `config.json`.
    pub architectures: Vec<String>,
}

impl Default for ModelParams {
    fn default() -> Self {
        Self {
            context_length: 1 << 20,
            layers: 78,
            kv_bytes_per_token_layer: 1152,
            indexer_bytes_per_token_layer: 132,
            draft_layers: 1,
            weights_gib_per_gpu: 71.76,
            model_type: "glm_moe_dsa".to_owned(),
            architectures: vec!["GlmMoeDsaForCausalLM".to_owned()],
        }
    }
}

/// The device one DP rank runs on. Defaults: an AMD Instinct MI355X.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceParams {
    /// The accelerator's name (`/v1/loads` `accelerator`).
    pub name: String,
    /// Device memory, GiB, all free before the weights load: 288 (HBM3E).
    pub memory_gib: f64,
}

impl Default for DeviceParams {
    fn default() -> Self {
        Self { name: "AMD Instinct MI355X".to_owned(), memory_gib: 288.0 }
    }
}

/// The command line's part in the sizing.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInputs {
    /// What the `--mem-fraction-static` heuristic reads.
    pub heuristic: HeuristicFlags,
    /// `--mem-fraction-static`, if given.
    pub mem_fraction_static: Option<f64>,
    /// `--max-total-tokens`, if given.
    pub max_total_tokens: Option<u64>,
    /// `--page-size`.
    pub page_size: u32,
    /// Whether an EAGLE-style `--speculative-algorithm` adds the draft's KV.
    pub speculative: bool,
    /// The resolved context length.
    pub context_length: u32,
}

/// The flags of [`MemFractionInputs`] (the device's memory comes from [`DeviceParams`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeuristicFlags {
    /// The worker's role.
    pub mode: DisaggregationMode,
    /// `--tp-size`.
    pub tp_size: u32,
    /// Attention-DP ranks (1 without DP attention).
    pub attn_dp_size: u32,
    /// `--max-running-requests`, if given.
    pub max_running_requests: Option<u32>,
    /// `--speculative-num-draft-tokens`, if given.
    pub speculative_num_draft_tokens: Option<u32>,
    /// `--chunked-prefill-size`.
    pub chunked_prefill_size: i64,
    /// `--cuda-graph-max-bs-decode`, if given.
    pub cuda_graph_max_bs_decode: Option<u32>,
}

/// A sized pool, per DP rank.
#[derive(Debug, Clone, PartialEq)]
pub struct KvPool {
    /// Tokens the pool holds (`max_total_num_tokens`).
    pub max_total_num_tokens: u64,
    /// Tokens the memory would hold, before `--max-total-tokens`.
    pub profiled_tokens: u64,
    /// The fraction used (the flag, or SGLang's default).
    pub mem_fraction_static: f64,
    /// KV bytes per token.
    pub cell_bytes: u64,
    /// Weights on the device, GiB.
    pub weight_gib: f64,
    /// The pool's size, GiB.
    pub kv_cache_gib: f64,
    /// Device memory free at start, GiB.
    pub startup_available_gib: f64,
    /// Requests one DP rank runs at most (`resolve_max_num_reqs`).
    pub max_running_requests: u32,
    /// Longest prompt accepted: `min(context − 1, pool − 1) − 5`.
    pub max_req_input_len: u64,
}

/// A configuration SGLang would refuse to start with.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PoolError {
    /// The weights leave no memory for the KV pool.
    #[error(
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction}. \
         Raise --mem-fraction-static above {minimum:.3} (weights {weights_gib:.2} GiB on a {device_gib} GiB device)"
    )]
    NoRoom {
        /// The fraction in force.
        fraction: f64,
        /// The smallest fraction that leaves room.
        minimum: f64,
        /// Weights per GPU, GiB.
        weights_gib: f64,
        /// Device memory, GiB.
        device_gib: f64,
    },
    /// Not even one page fits.
    #[error(
        "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static={0}"
    )]
    Empty(f64),
    /// A parameter out of range.
    #[error("--mem-fraction-static must be in (0, 1] (got {0})")]
    Fraction(f64),
}

impl ModelParams {
    /// KV bytes per token: every layer's KV and indexer rows, plus the draft's under speculation
    /// (SGLang adds `int(target_kv × draft_layers / layers)` and the draft's indexer rows).
    pub fn cell_bytes(&self, speculative: bool) -> u64 {
        let per_layer =
            u64::from(self.kv_bytes_per_token_layer) + u64::from(self.indexer_bytes_per_token_layer);
        let draft = if speculative { u64::from(self.draft_layers) } else { 0 };
        per_layer * (u64::from(self.layers) + draft)
    }
}

/// Sizes the pool; also returns SGLang's start-up warnings.
pub fn size(
    model: &ModelParams,
    device: &DeviceParams,
    i: &PoolInputs,
) -> Result<(KvPool, Vec<String>), PoolError> {
    let h = i.heuristic;
    let heuristic = MemFractionInputs {
        mode: h.mode,
        device_mib: device.memory_gib * 1024.0,
        tp_size: h.tp_size,
        attn_dp_size: h.attn_dp_size,
        max_running_requests: h.max_running_requests,
        speculative_num_draft_tokens: h.speculative_num_draft_tokens,
        chunked_prefill_size: h.chunked_prefill_size,
        cuda_graph_max_bs_decode: h.cuda_graph_max_bs_decode,
    };
    let fraction =
        i.mem_fraction_static.unwrap_or_else(|| mem_fraction::default_mem_fraction_static(&heuristic));
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(PoolError::Fraction(fraction));
    }
    let free = device.memory_gib;
    let rest = free - model.weights_gib_per_gpu - free * (1.0 - fraction);
    if rest <= 0.0 {
        let minimum = 1.0 - (free - model.weights_gib_per_gpu) / free;
        return Err(PoolError::NoRoom {
            fraction,
            minimum,
            weights_gib: model.weights_gib_per_gpu,
            device_gib: device.memory_gib,
        });
    }
    let page = u64::from(i.page_size.max(1));
    let cell = model.cell_bytes(i.speculative).max(1);
    let profiled = (rest * GIB) as u64 / cell / page * page;
    let mut warnings = Vec::new();
    let tokens = match i.max_total_tokens {
        Some(limit) if limit > profiled => {
            warnings.push(format!(
                "max_total_tokens={limit} is larger than the profiled value {profiled}. Use the profiled value instead."
            ));
            profiled
        }
        Some(limit) => limit / page * page,
        None => profiled,
    };
    if tokens == 0 {
        return Err(PoolError::Empty(fraction));
    }
    let context = u64::from(i.context_length);
    if tokens < context {
        warnings.push(format!(
            "KV pool holds {tokens} tokens, fewer than --context-length {context}. One full-length request cannot fit."
        ));
    }
    let pool = KvPool {
        max_total_num_tokens: tokens,
        profiled_tokens: profiled,
        mem_fraction_static: fraction,
        cell_bytes: cell,
        weight_gib: model.weights_gib_per_gpu,
        kv_cache_gib: tokens as f64 * cell as f64 / GIB,
        startup_available_gib: free,
        max_running_requests: max_running_requests(
            tokens,
            i.context_length,
            h.max_running_requests,
            h.attn_dp_size,
        ),
        max_req_input_len: (context.saturating_sub(1)).min(tokens.saturating_sub(1)).saturating_sub(5),
    };
    Ok((pool, warnings))
}

/// `resolve_max_num_reqs`: the requests one DP rank runs at most. Unset: `capacity / context ×
/// 512` within [2048, 4096]; set: the flag split over the attention-DP ranks. Never more than
/// half the pool's tokens.
pub fn max_running_requests(capacity: u64, context_length: u32, flag: Option<u32>, attn_dp_size: u32) -> u32 {
    let half = capacity / 2;
    let wanted = match flag {
        Some(total) => u64::from((total / attn_dp_size.max(1)).max(1)),
        None => {
            let estimated = (capacity as f64 / f64::from(context_length.max(1)) * 512.0) as u64;
            estimated.clamp(2048, 4096)
        }
    };
    u32::try_from(wanted.min(half)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;

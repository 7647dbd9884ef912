//! SGLang's default `--mem-fraction-static`, the share of device memory it keeps for weights
//! and the KV pool when the flag is not given: the device memory less an estimate of the
//! activations and CUDA-graph buffers (SGLang 0.5.23
//! `python/sglang/srt/arg_groups/memory_hook.py`, `handle_gpu_memory_settings` and
//! `reserve_for_graph_mb`). Pure arithmetic in MiB, as SGLang does it.
//!
//! Modelled as SGLang runs an MLA model on a GPU: decode CUDA graphs on, no prefill CUDA graph
//! (its MLA reserve is not counted), no DeepEP all-to-all buffers, no post-capture KV sizing
//! (SGLang never uses it for MLA models), not a multimodal model.

use crate::disaggregation::DisaggregationMode;

/// What the heuristic reads from the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemFractionInputs {
    /// The worker's role.
    pub mode: DisaggregationMode,
    /// Device memory in MiB (`get_device_memory_capacity`).
    pub device_mib: f64,
    /// `--tp-size`.
    pub tp_size: u32,
    /// Attention-DP ranks (1 without DP attention).
    pub attn_dp_size: u32,
    /// `--max-running-requests`, if given.
    pub max_running_requests: Option<u32>,
    /// `--speculative-num-draft-tokens`, if given.
    pub speculative_num_draft_tokens: Option<u32>,
    /// `--chunked-prefill-size` (≤ 0: no chunking).
    pub chunked_prefill_size: i64,
    /// `--cuda-graph-max-bs-decode`, if given.
    pub cuda_graph_max_bs_decode: Option<u32>,
}

/// `--max-prefill-tokens`' default (SGLang 0.5.23 `arg_groups/fields/schedule.py`), the
/// activation estimate when chunking is off.
const MAX_PREFILL_TOKENS: f64 = 16_384.0;

/// The decode CUDA graph's largest batch: `--cuda-graph-max-bs-decode`, else SGLang's default
/// by device memory (512 above 160 GiB, 256 above 60 GiB, …), capped at
/// `--max-running-requests` when that is smaller.
pub fn decode_graph_max_bs(i: &MemFractionInputs) -> u32 {
    let gib = i.device_mib / 1024.0;
    let by_memory = match gib {
        g if g < 20.0 => 8,
        g if g < 35.0 && i.tp_size < 4 => 48,
        g if g < 35.0 => 160,
        g if g < 60.0 && i.tp_size < 4 => 32,
        g if g < 60.0 => 160,
        g if g < 160.0 && i.tp_size < 4 => 256,
        g if g < 160.0 => 512,
        _ => 512,
    };
    match (i.cuda_graph_max_bs_decode, i.max_running_requests) {
        (Some(bs), _) => bs,
        (None, Some(mrr)) if mrr < by_memory => mrr,
        (None, _) => by_memory,
    }
}

/// MiB SGLang keeps back for activations and graphs.
pub fn reserved_mib(i: &MemFractionInputs) -> f64 {
    let max_bs = f64::from(decode_graph_max_bs(i));
    let activation_tokens = match i.mode {
        DisaggregationMode::Decode => {
            let running = i.max_running_requests.map_or(max_bs, f64::from).max(1.0);
            let draft = f64::from(i.speculative_num_draft_tokens.unwrap_or(1).max(1));
            (running * draft).max(2048.0)
        }
        _ if i.chunked_prefill_size > 0 => (i.chunked_prefill_size as f64).max(2048.0),
        _ => MAX_PREFILL_TOKENS.max(2048.0),
    };
    let mut reserved = 512.0 + activation_tokens * 1.5;
    reserved += f64::from(i.tp_size) / 8.0 * 1024.0;
    if i.mode != DisaggregationMode::Prefill {
        reserved += max_bs * 2.0;
        if i.attn_dp_size > 1 {
            let dp = f64::from(i.attn_dp_size);
            reserved += max_bs * dp * 3.0;
            if max_bs > 300.0 {
                reserved += max_bs * dp * 1.5;
            }
        }
    }
    if i.device_mib > 60.0 * 1024.0 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    reserved
}

/// `round((gpu_mem − reserved) / gpu_mem, 3)`.
pub fn default_mem_fraction_static(i: &MemFractionInputs) -> f64 {
    let fraction = (i.device_mib - reserved_mib(i)) / i.device_mib;
    (fraction * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kit_decode() -> MemFractionInputs {
        MemFractionInputs {
            mode: DisaggregationMode::Decode,
            device_mib: 288.0 * 1024.0,
            tp_size: 8,
            attn_dp_size: 8,
            max_running_requests: None,
            speculative_num_draft_tokens: Some(6),
            chunked_prefill_size: 8192,
            cuda_graph_max_bs_decode: None,
        }
    }

    #[test]
    fn the_kit_decode_keeps_25_gib_back() {
        // 512 + 3072 × 1.5 (512 requests × 6 draft tokens) + 1024 (TP8) + 1024 (graphs)
        // + 12288 and 6144 (DP attention over 8 ranks, max bs 512).
        let i = kit_decode();
        assert_eq!(decode_graph_max_bs(&i), 512);
        assert_eq!(reserved_mib(&i), 25_600.0);
        assert_eq!(default_mem_fraction_static(&i), 0.913);
    }

    #[test]
    fn a_prefill_reserves_for_its_chunk_and_the_floor() {
        let i = MemFractionInputs {
            mode: DisaggregationMode::Prefill,
            tp_size: 1,
            attn_dp_size: 1,
            speculative_num_draft_tokens: None,
            ..kit_decode()
        };
        // 512 + 8192 × 1.5 + 128 = 12928 MiB, above the 10 GiB floor.
        assert_eq!(reserved_mib(&i), 12_928.0);
        assert_eq!(default_mem_fraction_static(&i), 0.956);
        // A small device: no floor, a smaller graph.
        let small = MemFractionInputs { device_mib: 24.0 * 1024.0, mode: DisaggregationMode::Null, ..i };
        assert_eq!(decode_graph_max_bs(&small), 48);
        assert_eq!(reserved_mib(&small), 512.0 + 8192.0 * 1.5 + 128.0 + 96.0);
    }

    #[test]
    fn flags_bound_the_graph() {
        let i = MemFractionInputs { max_running_requests: Some(64), ..kit_decode() };
        assert_eq!(decode_graph_max_bs(&i), 64);
        let i = MemFractionInputs { cuda_graph_max_bs_decode: Some(128), ..kit_decode() };
        assert_eq!(decode_graph_max_bs(&i), 128);
    }
}

//! SGLang's KV-pool flags the emulator honours: `--max-total-tokens` (caps the pool
//! [`crate::kv_pool`] sizes), `--mem-fraction-static` (the share of device memory for weights and
//! the pool) and `--num-reserved-decode-tokens` (the headroom a decode's prealloc queue reserves
//! per request). SGLang 0.5.23 `python/sglang/srt/arg_groups/fields/schedule.py` and
//! `python/sglang/srt/arg_groups/fields/disagg.py`.

use clap::Args as ClapArgs;

use crate::scheduler::kv::{DEFAULT_RESERVED_DECODE_TOKENS, KvBudget};

#[derive(ClapArgs, Debug, Clone)]
#[command(next_help_heading = "SGLang KV pool")]
pub(super) struct MemoryArgs {
    /// Caps each DP rank's KV pool, in tokens (never above what the memory holds). Enforced on a
    /// PD decode (prealloc queue, retraction); elsewhere only reported.
    #[arg(long, env = "INFERA_SIM_MAX_TOTAL_TOKENS")]
    pub(super) max_total_tokens: Option<u64>,
    /// Share of device memory for weights and the KV pool (default: SGLang's estimate).
    #[arg(long, env = "INFERA_SIM_MEM_FRACTION_STATIC")]
    pub(super) mem_fraction_static: Option<f64>,
    /// Decode tokens a PD decode reserves per request before admitting another.
    #[arg(long, env = "INFERA_SIM_NUM_RESERVED_DECODE_TOKENS", default_value_t = DEFAULT_RESERVED_DECODE_TOKENS)]
    num_reserved_decode_tokens: u32,
}

impl MemoryArgs {
    /// The budget of a pool of `capacity` tokens (the caller decides where it is enforced).
    pub(super) fn budget(&self, capacity: u64) -> KvBudget {
        KvBudget { capacity: Some(capacity), reserved_decode_tokens: self.num_reserved_decode_tokens }
    }
}

//! SGLang's KV-pool flags the emulator honours: `--max-total-tokens` (a decode rank's KV
//! capacity) and `--num-reserved-decode-tokens` (the headroom its prealloc queue reserves per
//! request). SGLang 0.5.23 `python/sglang/srt/arg_groups/fields/schedule.py` and
//! `python/sglang/srt/arg_groups/fields/disagg.py`.

use clap::Args as ClapArgs;

use crate::scheduler::kv::{DEFAULT_RESERVED_DECODE_TOKENS, KvBudget};

#[derive(ClapArgs, Debug, Clone)]
#[command(next_help_heading = "SGLang KV pool")]
pub(super) struct MemoryArgs {
    /// KV capacity of each DP rank in tokens. Honoured on a PD decode (prealloc queue,
    /// retraction); elsewhere only reported. Unset: unbounded.
    #[arg(long, env = "INFERA_SIM_MAX_TOTAL_TOKENS")]
    max_total_tokens: Option<u64>,
    /// Decode tokens a PD decode reserves per request before admitting another.
    #[arg(long, env = "INFERA_SIM_NUM_RESERVED_DECODE_TOKENS", default_value_t = DEFAULT_RESERVED_DECODE_TOKENS)]
    num_reserved_decode_tokens: u32,
}

impl MemoryArgs {
    /// The budget as given (the caller decides where it is enforced).
    pub(super) fn budget(&self) -> KvBudget {
        KvBudget { capacity: self.max_total_tokens, reserved_decode_tokens: self.num_reserved_decode_tokens }
    }
}

//! KV events as SGLang's schedulers record them (`sglang/srt/mem_cache/events.py`), decoded from
//! either wire encoding; one batch per scheduler step and DP rank.

/// One batch as published on a rank's PUB socket: `[ts, events, attn_dp_rank]`.
#[derive(Clone, Debug, PartialEq)]
pub struct EventBatch {
    /// Seconds since the epoch when the scheduler step published the batch.
    pub ts: f64,
    /// The events of the step, in order.
    pub events: Vec<KvEvent>,
    /// The publisher's DP rank, when the batch carries it.
    pub attn_dp_rank: Option<u32>,
}

/// Where a block lives (`StorageMedium`); `None` on the wire means the GPU pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Device memory (`"GPU"`), or no medium given.
    Gpu,
    /// HiCache host tier (`"CPU_PINNED"`).
    CpuPinned,
    /// HiCache disk tier (`"DISK"`).
    Disk,
    /// An external store (`"EXTERNAL"`).
    External,
}

/// One cache change.
#[derive(Clone, Debug, PartialEq)]
pub enum KvEvent {
    /// Consecutive pages stored under one radix node, chained after `parent_block_hash`.
    BlockStored {
        /// The engine's hash of each page, in order.
        block_hashes: Vec<i64>,
        /// The engine's hash of the page before the first one; `None` at the root.
        parent_block_hash: Option<i64>,
        /// All pages' tokens, concatenated (an EAGLE bigram `[a, b]` arrives as its first token `a`).
        token_ids: Vec<u64>,
        /// Tokens per page (the last page may be shorter).
        block_size: u32,
        /// Where the pages are.
        medium: Medium,
        /// The `cache_salt` of the request that stored them (0.5.18's `BlockStoredWithMetadata`,
        /// a field from 0.5.20): SGLang hashed the chain after its [`crate::hash::salt_seed`].
        cache_salt: Option<String>,
        /// The name of the LoRA adapter whose requests stored them (0.5.23's `lora_name`): SGLang
        /// hashed them in the adapter's namespace, which the index stands in for with
        /// [`crate::hash::adapter_seed`].
        lora_name: Option<String>,
    },
    /// Pages evicted from `medium`.
    BlockRemoved {
        /// The engine's hashes of the evicted pages.
        block_hashes: Vec<i64>,
        /// Where they were evicted from.
        medium: Medium,
    },
    /// The whole cache was reset (start-up, `/flush_cache`).
    AllBlocksCleared,
}

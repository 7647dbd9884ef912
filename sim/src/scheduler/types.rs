//! What goes in and out of the [`Scheduler`](super::Scheduler).

use crate::prefix_cache::PromptPages;

/// An engine-local request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

/// What the core reports to the shell.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The prompt is prefilled; `cached_tokens` came from the prefix cache.
    Prefilled {
        /// The request this concerns.
        id: ReqId,
        /// Prompt tokens found in the cache.
        cached_tokens: u32,
    },
    /// The request has emitted `total` tokens so far.
    Tokens {
        /// The request this concerns.
        id: ReqId,
        /// Tokens emitted so far.
        total: u32,
    },
    /// The request emitted all its tokens and left the engine.
    Finished {
        /// The request this concerns.
        id: ReqId,
    },
    /// Decode role: the rank reserved the request's KV; its transfer may start.
    Preallocated {
        /// The request this concerns.
        id: ReqId,
    },
    /// The engine gave up on the request and it left (its prompt exceeds the KV capacity,
    /// or it is the last one of a batch that still does not fit after every retraction).
    Aborted {
        /// The request this concerns.
        id: ReqId,
    },
}

/// What a request needs from the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// Prefill `pages` (then decode, or hold for the KV transfer when `hold` is set).
    Prefill {
        /// The prompt's pages (prefix-cache keys, and the tokens KV events carry).
        pages: PromptPages,
        /// Stop after the first token in `Transfer` (prefill role) instead of decoding.
        hold: bool,
    },
    /// Wait in `Transfer` for the KV (decode role); [`Scheduler::kv_arrived`](super::Scheduler::kv_arrived) starts decoding.
    AwaitKv,
}

/// A request entering the engine.
#[derive(Debug, Clone)]
pub struct Admission {
    /// The DP rank it runs on.
    pub rank: usize,
    /// Prompt length in tokens (≥ 1).
    pub prompt_tokens: u32,
    /// Tokens to generate.
    pub max_new_tokens: u32,
    /// Stall fault: stop stepping after this many tokens.
    pub stall_after: Option<u32>,
    /// What it needs.
    pub work: Work,
}

/// One rank's counters for `/v1/loads` and `/server_info`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RankSnapshot {
    /// Decoding, stalled, or in the prefill batch in flight.
    pub running: u32,
    /// In the prefill queue.
    pub waiting: u32,
    /// Uncached tokens estimated for the prefill queue.
    pub waiting_uncached_tokens: u64,
    /// In the KV-transfer phase.
    pub transfer: u32,
    /// Decode role: waiting for a KV reservation (`decode_prealloc_queue_reqs`).
    pub prealloc: u32,
    /// Decode role: retracted, waiting to resume (`decode_retracted_queue_reqs`).
    pub retracted: u32,
    /// Requests the last retraction gave back, as SGLang's decode log last saw it
    /// (`queues.retracted`).
    pub retracted_last: u32,
    /// Prompt plus output of the prealloc queue (`num_prealloc_ready_tokens`: the sim's
    /// handshake is instant, so every queued request is ready).
    pub prealloc_tokens: u64,
    /// Prompt plus output of the prealloc and retracted queues: tokens owed but not held
    /// (`num_total_tokens` adds them to the used ones).
    pub pending_tokens: u64,
    /// Prompt plus output of requests whose KV has not arrived (prealloc and transfer queues on
    /// a decode; `num_active_tokens` leaves them out).
    pub awaiting_kv_tokens: u64,
    /// KV held: context of running and transferring requests.
    pub used_tokens: u64,
    /// Tokens held by the prefix cache.
    pub cached_tokens: u64,
    /// SGLang's decode step-time moment sums (`decode_moments`), `None` before the first.
    pub decode_moments: Option<[f64; 6]>,
}

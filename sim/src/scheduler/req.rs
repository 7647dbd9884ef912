//! A request inside the core: where it is and how far it got.

use crate::prefix_cache::PromptPages;

use super::kv::KvReq;

/// Where a request is.
#[derive(Debug)]
pub(super) enum Phase {
    Waiting,
    Prefilling,
    Running,
    Stalled,
    Transfer,
    /// Decode role: waiting for its KV reservation (SGLang's `DecodePreallocQueue.queue`).
    Prealloc,
    /// Decode role: retracted under KV pressure, KV freed, waiting to resume
    /// (`DecodePreallocQueue.retracted_queue`).
    Retracted,
}

#[derive(Debug)]
pub(super) struct Req {
    pub(super) rank: usize,
    pub(super) prompt_tokens: u32,
    pub(super) pages: PromptPages,
    pub(super) max_new: u32,
    pub(super) stall_after: Option<u32>,
    pub(super) hold: bool,
    pub(super) phase: Phase,
    pub(super) cached: u32,
    /// Uncached prompt tokens still to prefill.
    pub(super) remaining: u32,
    pub(super) emitted: u32,
    pub(super) steps: u32,
}

impl Req {
    /// Prompt plus generated tokens: the KV it holds while transferring or decoding.
    pub(super) fn context(&self) -> u64 {
        u64::from(self.prompt_tokens) + u64::from(self.emitted)
    }

    /// The request as the KV budget sees it.
    pub(super) fn kv(&self) -> KvReq {
        KvReq { prompt: self.prompt_tokens, output: self.emitted, max_new: self.max_new }
    }
}

//! The KV-event payload: one msgpack [`EventBatch`] per ZMQ message, as SGLang's msgspec writes it
//! (`EventBatch` and `KVCacheEvent` in `python/sglang/srt/disaggregation/kv_events.py`: SGLang
//! 0.5.18 declares the events `array_like`, 0.5.23 `omit_defaults` maps).
//!
//! The batch is always the array `[ts, events, attn_dp_rank]`. Events are tagged **arrays**
//! (`["BlockStored", …]`, SGLang ≤ 0.5.19, including 0.5.18's 8-element `BlockStoredWithMetadata`)
//! or tagged **maps** (`{"type": "BlockStored", …}`, ≥ 0.5.20, fields equal to their default
//! omitted). [`decode_batch`] accepts both, even mixed in one batch, every msgpack integer width,
//! EAGLE bigram token ids, a nil or missing `attn_dp_rank`, and ignores unknown map keys; it
//! never panics and never allocates more than the payload's size warrants, and rejects what is
//! malformed or past the caps below with a [`WireError`] naming the event and field.
//! [`encode_batch`] writes either encoding byte for byte as msgspec does.

mod decode;
mod encode;
mod error;
pub(crate) mod reader;
#[cfg(test)]
mod tests;

pub use error::{Location, WireError};

use crate::event::{EventBatch, Medium};

/// Most events one batch may carry.
pub const MAX_EVENTS_PER_BATCH: usize = 65_536;
/// Most block hashes one event may carry (the experimental sgl-router's cap).
pub const MAX_HASHES_PER_EVENT: usize = 65_536;
/// Most token ids one event may carry.
pub const MAX_TOKENS_PER_EVENT: usize = 1 << 24;
/// Most elements (array) or entries (map) one event may have.
pub const MAX_EVENT_FIELDS: usize = 64;

/// How events are laid out inside a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Tagged arrays, every field present (SGLang ≤ 0.5.19).
    Arrays,
    /// Tagged maps, `None`-default fields omitted (SGLang ≥ 0.5.20).
    Maps,
}

impl Encoding {
    /// The encoding SGLang `version` (`"0.5.18"`, `"0.5.23.post1"`) publishes; unparsable
    /// versions count as the newest.
    pub fn for_sglang(version: &str) -> Self {
        if sglang_at_least(version, [0, 5, 20]) { Self::Maps } else { Self::Arrays }
    }
}

/// Whether SGLang `version` is at least `want`; a version whose first three dot-separated parts
/// do not start with digits counts as the newest.
pub(crate) fn sglang_at_least(version: &str, want: [u32; 3]) -> bool {
    let mut parts = version.trim().trim_start_matches('v').split('.');
    let mut have = [0u32; 3];
    for slot in &mut have {
        let part = parts.next().unwrap_or("");
        let digits = &part[..part.find(|c: char| !c.is_ascii_digit()).unwrap_or(part.len())];
        match digits.parse() {
            Ok(n) => *slot = n,
            Err(_) => return true,
        }
    }
    have >= want
}

impl Medium {
    /// SGLang's `StorageMedium` value.
    pub fn as_wire(self) -> &'static str {
        match self {
            Self::Gpu => "GPU",
            Self::CpuPinned => "CPU_PINNED",
            Self::Disk => "DISK",
            Self::External => "EXTERNAL",
        }
    }

    /// The medium named `name` on the wire, if SGLang has it.
    pub fn from_wire(name: &str) -> Option<Self> {
        Some(match name {
            "GPU" => Self::Gpu,
            "CPU_PINNED" => Self::CpuPinned,
            "DISK" => Self::Disk,
            "EXTERNAL" => Self::External,
            _ => return None,
        })
    }
}

/// Decodes one batch payload (the third frame of a live message or a replay reply).
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, WireError> {
    decode::batch(payload)
}

/// Encodes `batch` as SGLang's msgspec would in `encoding`; fails only past the caps above or on
/// a `block_size` of 0 — exactly what [`decode_batch`] would reject.
pub fn encode_batch(batch: &EventBatch, encoding: Encoding) -> Result<Vec<u8>, WireError> {
    encode::batch(batch, encoding)
}

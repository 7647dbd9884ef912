//! What every part of the core says about one target: its dense key and what it holds.
//!
//! A leaf: the view hands out [`TargetKey`]s, the ledger keeps a [`Load`] per key, scoring reads
//! both; none of them needs the others to name a target.

/// Dense index of a target.
///
/// Targets are interned to keys so the ledger and the scoring loop index arrays instead of
/// hashing names. A key, once given to a `(worker, rank)`, stays with it for the life of the
/// process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey(u32);

impl TargetKey {
    /// The array index.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// A key from an index (the view interning targets; tests and benches that build ledgers
    /// without a view).
    pub fn from_index(i: u32) -> Self {
        Self(i)
    }
}

/// What a target holds right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Sum of the input tokens of the live reservations on the target.
    pub booked_input_tokens: u64,
    /// Number of live reservations on the target.
    pub held_requests: u64,
    /// Of those, decode reservations whose request's prefill reservation is still live: the
    /// request is still queued or computing on a prefill, not yet loading this target's steps.
    pub prefilling: Prefilling,
}

/// The part of a decode target's load still in prefill (see [`Load::prefilling`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prefilling {
    /// Held requests still in prefill.
    pub requests: u64,
    /// Their input tokens.
    pub tokens: u64,
}

/// A decode target's prefilling requests as a pick weighs them: each counts `w` ≤ 1 of a
/// request (and `w` of its tokens) by its age (`crate::prefill_phase`); all ones without the
/// age decay, when this equals [`Prefilling`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WeightedPrefilling {
    /// Σ w over the prefilling requests.
    pub requests: f64,
    /// Σ w × tokens.
    pub tokens: f64,
}

impl From<Prefilling> for WeightedPrefilling {
    fn from(p: Prefilling) -> Self {
        Self { requests: p.requests as f64, tokens: p.tokens as f64 }
    }
}

/// What a decode target's engine says of its KV memory, for the headroom check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvUse {
    /// KV tokens in use (SGLang's `num_used_tokens`).
    pub used_tokens: u64,
    /// KV capacity in tokens (`max_total_num_tokens`).
    pub capacity_tokens: u64,
}

/// Where the core asks a target's KV use; the engine readings answer it.
pub trait KvRoom: std::fmt::Debug {
    /// The target's KV use, when its engine has reported a capacity.
    fn kv_use(&self, target: &infera_proto::types::Target) -> Option<KvUse>;

    /// The requests the target's engine says it holds (running and queued), as last read; `None`
    /// without a reading.
    fn engine_requests(&self, _target: &infera_proto::types::Target) -> Option<u64> {
        None
    }
}

impl KvUse {
    /// Whether `request_tokens` more would overflow the capacity, counting what is already on
    /// its way: the larger of the KV in use and the input tokens the ledger holds there.
    pub fn would_overflow(&self, load: Load, request_tokens: u64) -> bool {
        self.used_tokens.max(load.booked_input_tokens) + request_tokens > self.capacity_tokens
    }
}

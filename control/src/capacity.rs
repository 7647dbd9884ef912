//! Per-rank caps (`--max-requests-per-rank`, `--max-kv-usage`): a rank at its cap takes no
//! pick; when every candidate is at it the pick is refused (`AT_CAPACITY`), and the proxies hold
//! the request in their queue until a rank has room or the queue's timeout passes. The request
//! count is the ledger's (what the engine runs and queues); the KV use is the engine's own
//! reading.

use crate::target::{KvUse, Load};

/// The caps in force; `None` = no cap.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Capacity {
    /// Most requests a rank may hold.
    pub max_requests: Option<u64>,
    /// Highest KV use (used / capacity) at which a rank takes picks.
    pub max_kv_usage: Option<f64>,
}

impl Capacity {
    /// Whether any cap is set.
    pub fn is_on(&self) -> bool {
        self.max_requests.is_some() || self.max_kv_usage.is_some()
    }

    /// Whether a rank holding `load`, with KV use `kv` (when its engine reported one), has room
    /// for one more request.
    pub fn has_room(&self, load: &Load, kv: Option<KvUse>) -> bool {
        let requests = self.max_requests.is_none_or(|max| load.held_requests < max);
        let kv = match (self.max_kv_usage, kv) {
            (Some(max), Some(kv)) if kv.capacity_tokens > 0 => {
                (kv.used_tokens as f64 / kv.capacity_tokens as f64) < max
            }
            _ => true,
        };
        requests && kv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_has_room_below_every_cap_it_has_a_reading_for() {
        let load = |held| Load { held_requests: held, ..Load::default() };
        let kv = |used| Some(KvUse { used_tokens: used, capacity_tokens: 1_000 });
        let none = Capacity::default();
        assert!(!none.is_on() && none.has_room(&load(1_000_000), kv(1_000)));
        let caps = Capacity { max_requests: Some(4), max_kv_usage: Some(0.9) };
        assert!(caps.has_room(&load(3), kv(899)));
        assert!(!caps.has_room(&load(4), kv(0)), "at the request cap");
        assert!(!caps.has_room(&load(0), kv(900)), "at the KV cap");
        assert!(caps.has_room(&load(0), None), "no reading: only the request cap applies");
    }
}

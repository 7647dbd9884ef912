//! Session affinity for prefill: a multi-turn session goes back to the prefill target that
//! holds its prefix. Entries expire after the session TTL of inactivity.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use infera_proto::types::SessionKey;

use crate::target::TargetKey;

/// Session → last prefill target.
#[derive(Debug, Default)]
pub struct Sessions {
    map: HashMap<SessionKey, (TargetKey, Instant)>,
}

impl Sessions {
    /// The session's target if it was used within `ttl`.
    pub fn get(&self, session: &SessionKey, now: Instant, ttl: Duration) -> Option<TargetKey> {
        self.map.get(session).filter(|(_, at)| now.duration_since(*at) < ttl).map(|(k, _)| *k)
    }

    /// Records the session's target.
    pub fn remember(&mut self, session: SessionKey, target: TargetKey, now: Instant) {
        self.map.insert(session, (target, now));
    }

    /// Drops the sessions idle for `ttl` or longer.
    pub fn sweep(&mut self, now: Instant, ttl: Duration) {
        self.map.retain(|_, (_, at)| now.duration_since(*at) < ttl);
    }

    /// Number of sessions remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

//! Session affinity for prefill: a multi-turn session goes back to the prefill target that
//! holds its prefix. Entries expire after the session TTL of inactivity, and the map holds at
//! most `--session-max` sessions: at the cap, the session used least recently is forgotten
//! (`infera_router_sessions_evicted_total`), so a flood of session keys costs a bounded amount.
//!
//! A session is remembered on its target once its prefill there reaches its end of stream: the
//! prompt is computed and cached there then. A pick cancelled before it was sent (a PD request
//! whose decode fleet admission queued gives its prefill pick back) or one that failed computed
//! nothing there, and leaves the session where its last computed prompt is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use infera_proto::types::SessionKey;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::target::TargetKey;

/// A remembered session: its target, the prompt tokens of its last pick there, when it was last
/// used, and its place in the use order.
#[derive(Debug, Clone, Copy)]
struct Entry {
    target: TargetKey,
    tokens: u64,
    at: Instant,
    seq: u64,
}

/// Where a session was last prefilled, and how long its prompt was: what that target's prefix
/// cache holds of the session's next turn, as far as routing alone can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastPrefill {
    /// The target.
    pub target: TargetKey,
    /// The prompt tokens of the session's last request there.
    pub tokens: u64,
}

/// A prefill pick for a session ([`Sessions::picked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PickedPrefill {
    /// The target picked.
    pub target: TargetKey,
    /// Its reservation's sequence.
    pub seq: u64,
    /// The request's prompt tokens.
    pub tokens: u64,
}

/// A prefill picked for a session that has not ended yet: the prompt its target will hold once
/// it reaches its end of stream.
#[derive(Debug, Clone)]
struct Computing {
    session: SessionKey,
    target: TargetKey,
    tokens: u64,
}

/// Session → last prefill target, at most a cap of them.
#[derive(Debug, Default)]
pub struct Sessions {
    map: HashMap<SessionKey, Entry>,
    /// The sessions' prefills under way, by their reservation's sequence.
    computing: HashMap<u64, Computing>,
    /// The sessions by last use (oldest first): the order of `Entry::seq`.
    order: BTreeMap<u64, SessionKey>,
    next_seq: u64,
    evicted: u64,
}

impl Sessions {
    /// The session's target if it was used within `ttl`.
    pub fn get(&self, session: &SessionKey, now: Instant, ttl: Duration) -> Option<TargetKey> {
        self.last(session, now, ttl).map(|l| l.target)
    }

    /// The session's last prefill if it was within `ttl`.
    pub fn last(&self, session: &SessionKey, now: Instant, ttl: Duration) -> Option<LastPrefill> {
        self.map
            .get(session)
            .filter(|e| now.duration_since(e.at) < ttl)
            .map(|e| LastPrefill { target: e.target, tokens: e.tokens })
    }

    /// Records the session's target and the prompt tokens it prefilled there; a new session past
    /// `max` makes room by forgetting the one used least recently.
    pub fn remember(&mut self, session: SessionKey, last: LastPrefill, now: Instant, max: usize) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(old) = self.map.get(&session) {
            self.order.remove(&old.seq);
        } else {
            while self.map.len() >= max.max(1) {
                let Some((_, oldest)) = self.order.pop_first() else { break };
                self.map.remove(&oldest);
                self.evicted += 1;
            }
        }
        self.order.insert(seq, session.clone());
        self.map.insert(session, Entry { target: last.target, tokens: last.tokens, at: now, seq });
    }

    /// Records prefill reservation `seq` of `tokens` prompt tokens picked for `session` on
    /// `target`; the session is remembered there once it ends computed ([`Sessions::ended`]).
    pub fn picked(&mut self, session: SessionKey, at: PickedPrefill) {
        let PickedPrefill { target, seq, tokens } = at;
        self.computing.insert(seq, Computing { session, target, tokens });
    }

    /// Prefill reservation `seq` ended at `now`; `computed` when at its end of stream: its
    /// session is remembered on its target with its prompt. Nothing for one not picked for a
    /// session, or one that ended before.
    pub fn ended(&mut self, seq: u64, computed: bool, now: Instant, max: usize) {
        let Some(c) = self.computing.remove(&seq) else { return };
        if computed {
            self.remember(c.session, LastPrefill { target: c.target, tokens: c.tokens }, now, max);
        }
    }

    /// How many prefills picked for a session have not ended.
    #[cfg(test)]
    fn computing(&self) -> usize {
        self.computing.len()
    }

    /// Drops the sessions idle for `ttl` or longer.
    pub fn sweep(&mut self, now: Instant, ttl: Duration) {
        let Self { map, order, .. } = self;
        map.retain(|_, e| {
            let keep = now.duration_since(e.at) < ttl;
            if !keep {
                order.remove(&e.seq);
            }
            keep
        });
    }

    /// Number of sessions remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Sessions forgotten at the cap since start.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

/// `infera_router_sessions` (remembered now) and `infera_router_sessions_evicted_total`.
#[derive(Clone, Debug, Default)]
pub struct SessionMetrics {
    sessions: Gauge,
    evicted: Counter,
    /// The evictions already counted (the counter moves by the difference).
    counted: Arc<AtomicU64>,
}

impl SessionMetrics {
    /// Registers both in `r` (control's `infera_router` registry).
    pub fn register(&self, r: &mut Registry) {
        r.register("sessions", "Sessions remembered for prefill affinity", self.sessions.clone());
        r.register(
            "sessions_evicted",
            "Sessions forgotten at --session-max, the least recently used first",
            self.evicted.clone(),
        );
    }

    /// Sets them from `sessions` (on the gauges' timer).
    pub fn export(&self, sessions: &Sessions) {
        self.sessions.set(i64::try_from(sessions.len()).unwrap_or(i64::MAX));
        let before = self.counted.swap(sessions.evicted(), Ordering::Relaxed);
        self.evicted.inc_by(sessions.evicted().saturating_sub(before));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize) -> SessionKey {
        SessionKey::new(format!("s-{n}"))
    }

    fn target(n: u32) -> LastPrefill {
        LastPrefill { target: TargetKey::from_index(n), tokens: 1_000 }
    }

    #[test]
    fn at_the_cap_the_session_used_least_recently_goes() {
        let (t0, ttl) = (Instant::now(), Duration::from_secs(60));
        let mut s = Sessions::default();
        for n in 0..3 {
            s.remember(key(n), target(0), t0, 3);
        }
        // s-0 is used again: s-1 is now the oldest.
        s.remember(key(0), target(1), t0, 3);
        s.remember(key(3), target(2), t0, 3);
        assert_eq!(s.len(), 3);
        assert_eq!(s.evicted(), 1);
        assert_eq!(s.get(&key(1), t0, ttl), None, "the least recently used one went");
        assert_eq!(s.last(&key(0), t0, ttl), Some(target(1)));
        assert_eq!(s.last(&key(3), t0, ttl), Some(target(2)));
        // A flood of new keys never holds more than the cap.
        for n in 10..10_000 {
            s.remember(key(n), target(0), t0, 3);
        }
        assert_eq!((s.len(), s.order.len()), (3, 3));
    }

    /// Only a prefill that reached its end of stream remembers its session on its target.
    #[test]
    fn a_session_is_remembered_where_its_prefill_ended_computed() {
        let (t0, ttl) = (Instant::now(), Duration::from_secs(60));
        let mut s = Sessions::default();
        let at = |t, seq, tokens| PickedPrefill { target: TargetKey::from_index(t), seq, tokens };
        let last = |s: &Sessions| s.last(&key(0), t0, ttl).map(|l| (l.target.index(), l.tokens));
        s.picked(key(0), at(0, 1, 1_000));
        assert_eq!(last(&s), None, "picked, not computed yet");
        s.ended(1, true, t0, 10);
        assert_eq!(last(&s), Some((0, 1_000)));
        // The next turn's pick, elsewhere, is cancelled before it is sent: the session stays.
        s.picked(key(0), at(1, 2, 1_500));
        s.ended(2, false, t0, 10);
        assert_eq!(last(&s), Some((0, 1_000)));
        // Its retry there ends computed; a second end of it is nothing.
        s.picked(key(0), at(1, 3, 1_500));
        s.ended(3, true, t0, 10);
        s.ended(3, false, t0, 10);
        assert_eq!(last(&s), Some((1, 1_500)));
        assert_eq!(s.computing(), 0);
    }

    #[test]
    fn a_sweep_keeps_the_order_in_step() {
        let t0 = Instant::now();
        let mut s = Sessions::default();
        s.remember(key(0), target(0), t0, 10);
        s.remember(key(1), target(0), t0 + Duration::from_secs(5), 10);
        s.sweep(t0 + Duration::from_secs(6), Duration::from_secs(3));
        assert_eq!((s.len(), s.order.len()), (1, 1));
        assert!(s.get(&key(1), t0 + Duration::from_secs(6), Duration::from_secs(3)).is_some());
    }
}

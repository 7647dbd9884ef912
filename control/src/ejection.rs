//! Outlier ejection, decided centrally: a target whose worker lives (its lease is kept) but fails
//! its legs is ejected for everyone at once, where every proxy on its own would keep sending it
//! picks. Pure and synchronous; time is passed in.
//!
//! Per target, a breaker ([`Breaker`]):
//!
//! ```text
//! healthy ──(N failures in a row)──▶ ejected (open for B) ──(B passed)──▶ probing (half-open)
//!    ▲                                   ▲                                    │ one pick at a time
//!    └──────────(S successes)────────────┼──────────────(a failure: B × 2)────┘
//! ```
//!
//! A failure is a leg released `FAILED` with a kind (connect, timeout, 5xx, stream cut: what the
//! proxy saw, `LegFailure`), an engine whose `/v1/loads` stays unreadable, or a rank whose
//! readings stay frozen while it holds requests (a hung scheduler); a success is a leg
//! that reached its end of stream. Cancellations and legs failed because the other leg failed
//! count for nothing. The defaults are SMG's: 10 failures, 60 s open, 3 successes to close; the
//! open time doubles with each failed probe up to `max_open`.
//!
//! A pool whose every target is ejected ignores the ejections (counted): routing somewhere beats
//! failing every request at the proxy.
//!
//! A proxy's failure report counts only while no other identity has just used the target
//! without one ([`witness`]): one credential's forged reports cannot eject what other proxies
//! keep using.

mod breaker;
pub mod metrics;
#[cfg(test)]
mod tests;
pub mod witness;

use std::time::{Duration, Instant};

use infera_proto::types::LegFailure;

pub use breaker::{Admit, Breaker, Ejection, Health, Transition};

use crate::identity::Identity;
use crate::target::TargetKey;
use witness::Witnesses;

/// The thresholds (`--eject-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EjectionPolicy {
    /// Failures in a row that eject a healthy target; 0 turns ejection off.
    pub failures: u32,
    /// How long the first ejection lasts.
    pub open: Duration,
    /// The longest an ejection lasts (each failed probe doubles it).
    pub max_open: Duration,
    /// Successful probes that close the breaker again.
    pub successes: u32,
    /// How long an identity's end of stream on a target discounts the failures other
    /// identities report there ([`witness`]); zero counts every report.
    pub witness_window: Duration,
}

impl Default for EjectionPolicy {
    fn default() -> Self {
        Self {
            failures: 10,
            open: Duration::from_secs(60),
            max_open: Duration::from_secs(600),
            successes: 3,
            witness_window: Duration::from_secs(60),
        }
    }
}

/// What happened to a leg, for its target's breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It reached its end of stream.
    Success,
    /// It failed, as the proxy (or the engine poll) saw it.
    Failure(Failure),
    /// It ended otherwise (cancelled, the other leg failed, the target left): no signal.
    Neutral,
}

impl Outcome {
    /// What a release says: its end of stream a success, a failure with its kind a failure,
    /// anything else nothing.
    pub fn of(reason: infera_proto::types::ReleaseReason, failure: Option<LegFailure>) -> Self {
        use infera_proto::types::ReleaseReason;
        match (reason, failure) {
            (ReleaseReason::Eof, _) => Self::Success,
            (ReleaseReason::Failed, Some(f)) => Self::Failure(Failure::Leg(f)),
            _ => Self::Neutral,
        }
    }
}

/// What counted as a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A leg, as the proxy saw it.
    Leg(LegFailure),
    /// The worker's `/v1/loads` has not answered for a while.
    EngineUnreachable,
    /// The rank's `/v1/loads` answers, but its engine clock has stood still for a while although
    /// it holds requests: its scheduler is hung (SGLang's HTTP server answers from the last
    /// snapshot the scheduler wrote).
    EngineStuck,
}

impl Failure {
    /// A metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leg(l) => l.as_str(),
            Self::EngineUnreachable => "engine_unreachable",
            Self::EngineStuck => "engine_stuck",
        }
    }
}

/// An ejection as it outlives its leader (persisted in etcd, read by the next one): the target,
/// when it may be probed again (wall clock), and how long the ejection lasts (a failed probe
/// doubles it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarriedEjection {
    /// The ejected target.
    pub target: infera_proto::types::Target,
    /// When its open time ends (in the past: it is probing).
    pub until: std::time::SystemTime,
    /// The ejection's length.
    pub open: Duration,
}

/// Every target's breaker, by key, and who witnesses each.
#[derive(Debug, Default)]
pub struct Breakers {
    policy: EjectionPolicy,
    breakers: Vec<Breaker>,
    witnesses: Witnesses,
}

/// What a reported leg did to its target's breaker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The breaker's change, if any.
    pub transition: Option<Transition>,
    /// A failure that counted for nothing: another identity witnesses the target.
    pub discounted: bool,
}

impl Breakers {
    /// Breakers under `policy`.
    pub fn new(policy: EjectionPolicy) -> Self {
        Self { policy, breakers: Vec::new(), witnesses: Witnesses::new(policy.witness_window) }
    }

    /// The thresholds in force.
    pub fn policy(&self) -> EjectionPolicy {
        self.policy
    }

    /// Whether `key` may take a pick at `now`.
    pub fn admits(&self, key: TargetKey, now: Instant) -> Admit {
        if self.policy.failures == 0 {
            return Admit::Yes;
        }
        self.breakers.get(key.index()).map_or(Admit::Yes, |b| b.admits(now))
    }

    /// `key` was picked at `now` (a probe when it was let through half-open).
    pub fn picked(&mut self, key: TargetKey, now: Instant) {
        if self.policy.failures > 0 {
            self.get(key).picked(now);
        }
    }

    /// A leg on `key` ended with `outcome`; what changed, if anything.
    pub fn observe(&mut self, key: TargetKey, outcome: Outcome, now: Instant) -> Option<Transition> {
        if self.policy.failures == 0 {
            return None;
        }
        let policy = self.policy;
        self.get(key).observe(outcome, &policy, now)
    }

    /// A leg on `key` that `reporter` booked ended with `outcome`, as its proxy reports it: an
    /// end of stream makes `reporter` a witness of `key`; a failure counts only when no other
    /// identity witnesses it ([`witness`]).
    pub fn observe_reported(
        &mut self,
        key: TargetKey,
        outcome: Outcome,
        reporter: &Identity,
        now: Instant,
    ) -> Observed {
        if self.policy.failures == 0 {
            return Observed::default();
        }
        let (outcome, discounted) = match outcome {
            Outcome::Success => {
                self.witnesses.success(key, reporter, now);
                (outcome, false)
            }
            Outcome::Failure(_) if !self.witnesses.failure_counts(key, reporter, now) => {
                (Outcome::Neutral, true)
            }
            _ => (outcome, false),
        };
        Observed { transition: self.observe(key, outcome, now), discounted }
    }

    /// Every ejected or probing target at `now`, with its ejection.
    pub fn ejections(&self, now: Instant) -> Vec<(TargetKey, Ejection)> {
        self.breakers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.ejection(now).map(|e| (TargetKey::from_index(i as u32), e)))
            .collect()
    }

    /// Ejects `key` as another leader had it (ignored with ejection off).
    pub fn carry(&mut self, key: TargetKey, ejection: Ejection) {
        if self.policy.failures > 0 {
            let open = ejection.open.min(self.policy.max_open);
            *self.get(key) = Breaker::ejected(Ejection { open, ..ejection });
        }
    }

    /// `key`'s health at `now`.
    pub fn health(&self, key: TargetKey, now: Instant) -> Health {
        self.breakers.get(key.index()).map_or(Health::default(), |b| b.health(now))
    }

    fn get(&mut self, key: TargetKey) -> &mut Breaker {
        let i = key.index();
        if self.breakers.len() <= i {
            self.breakers.resize_with(i + 1, Breaker::default);
        }
        &mut self.breakers[i]
    }
}

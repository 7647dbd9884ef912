//! One target's breaker: healthy (counting failures in a row), ejected until a deadline, or
//! probing (half-open: one pick at a time, closing after enough successes).

use std::time::{Duration, Instant};

use super::{EjectionPolicy, Failure, Outcome};

/// An ejection as a breaker holds it: out until `until` (probed from then on), lasting `open`
/// (a failed probe doubles it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ejection {
    /// When its open time ends.
    pub until: Instant,
    /// Its length.
    pub open: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Healthy {
        failures: u32,
    },
    /// Takes no picks until `until`; `open` is how long this ejection lasts.
    Ejected {
        until: Instant,
        open: Duration,
        failures: u32,
    },
    /// Half-open: `probing` while a probe is out; `successes` so far.
    Probing {
        probing: bool,
        successes: u32,
        open: Duration,
        failures: u32,
    },
}

impl Default for State {
    fn default() -> Self {
        Self::Healthy { failures: 0 }
    }
}

/// One target's breaker.
#[derive(Clone, Copy, Debug, Default)]
pub struct Breaker {
    state: State,
}

/// Whether a target takes a pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// It is healthy.
    Yes,
    /// It is half-open and no probe is out: this pick is the probe.
    Probe,
    /// It is ejected, or its one probe is out.
    No,
}

/// A change of a breaker's state, for the logs and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Ejected (from healthy, or again after a failed probe) for `open`.
    Ejected {
        /// How long.
        open: Duration,
        /// What failed last.
        cause: Failure,
        /// After a probe (else from healthy).
        reprobed: bool,
    },
    /// Healthy again after its probes succeeded.
    Readmitted,
}

/// A target's health as operators see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// `healthy`, `ejected` or `probing`.
    pub state: &'static str,
    /// Failures in a row (healthy), or since the last ejection.
    pub failures: u32,
    /// How long it stays ejected; zero unless ejected.
    pub ejected_for: Duration,
}

impl Default for Health {
    fn default() -> Self {
        Self { state: "healthy", failures: 0, ejected_for: Duration::ZERO }
    }
}

impl Breaker {
    /// Whether it takes a pick at `now`.
    pub fn admits(&self, now: Instant) -> Admit {
        match self.state {
            State::Healthy { .. } => Admit::Yes,
            State::Ejected { until, .. } if now >= until => Admit::Probe,
            State::Ejected { .. } | State::Probing { probing: true, .. } => Admit::No,
            State::Probing { probing: false, .. } => Admit::Probe,
        }
    }

    /// Picked at `now`: the probe is out when it was half-open.
    pub fn picked(&mut self, now: Instant) {
        self.promote(now);
        if let State::Probing { probing, .. } = &mut self.state {
            *probing = true;
        }
    }

    /// An ejection whose time is up becomes a half-open breaker.
    fn promote(&mut self, now: Instant) {
        if let State::Ejected { until, open, failures } = self.state
            && now >= until
        {
            self.state = State::Probing { probing: false, successes: 0, open, failures };
        }
    }

    /// A leg ended with `outcome` at `now`.
    pub fn observe(&mut self, outcome: Outcome, policy: &EjectionPolicy, now: Instant) -> Option<Transition> {
        self.promote(now);
        match (self.state, outcome) {
            (_, Outcome::Neutral) => {
                // A probe that ended without a verdict lets the next one through.
                if let State::Probing { probing, .. } = &mut self.state {
                    *probing = false;
                }
                None
            }
            (State::Healthy { .. }, Outcome::Success) => {
                self.state = State::Healthy { failures: 0 };
                None
            }
            (State::Healthy { failures }, Outcome::Failure(cause)) => {
                let failures = failures + 1;
                if failures < policy.failures {
                    self.state = State::Healthy { failures };
                    return None;
                }
                let open = policy.open.min(policy.max_open);
                self.state = State::Ejected { until: now + open, open, failures };
                Some(Transition::Ejected { open, cause, reprobed: false })
            }
            // Legs booked before the ejection still end; they change nothing but the count.
            (State::Ejected { until, open, failures }, Outcome::Failure(_)) => {
                self.state = State::Ejected { until, open, failures: failures + 1 };
                None
            }
            (State::Ejected { .. }, Outcome::Success) => None,
            (State::Probing { successes, open, failures, .. }, Outcome::Success) => {
                let successes = successes + 1;
                if successes >= policy.successes {
                    self.state = State::Healthy { failures: 0 };
                    return Some(Transition::Readmitted);
                }
                self.state = State::Probing { probing: false, successes, open, failures };
                None
            }
            (State::Probing { open, failures, .. }, Outcome::Failure(cause)) => {
                let open = (open * 2).min(policy.max_open);
                self.state = State::Ejected { until: now + open, open, failures: failures + 1 };
                Some(Transition::Ejected { open, cause, reprobed: true })
            }
        }
    }

    /// Its ejection at `now`, if it is ejected or probing (then due: `until` is `now`).
    pub fn ejection(&self, now: Instant) -> Option<Ejection> {
        match self.state {
            State::Healthy { .. } => None,
            State::Ejected { until, open, .. } => Some(Ejection { until: until.max(now), open }),
            State::Probing { open, .. } => Some(Ejection { until: now, open }),
        }
    }

    /// A breaker in `ejection` (one carried over from another leader: its failures stay with
    /// that leader).
    pub fn ejected(ejection: Ejection) -> Self {
        Self { state: State::Ejected { until: ejection.until, open: ejection.open, failures: 0 } }
    }

    /// Its health at `now`.
    pub fn health(&self, now: Instant) -> Health {
        match self.state {
            State::Healthy { failures } => Health { state: "healthy", failures, ejected_for: Duration::ZERO },
            State::Ejected { until, failures, .. } if now < until => {
                Health { state: "ejected", failures, ejected_for: until - now }
            }
            State::Ejected { failures, .. } | State::Probing { failures, .. } => {
                Health { state: "probing", failures, ejected_for: Duration::ZERO }
            }
        }
    }
}

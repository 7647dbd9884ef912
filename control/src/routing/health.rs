//! The core's side of outlier ejection ([`crate::ejection`]): the thresholds, a target's health,
//! and engines whose readings stopped; and the per-rank caps ([`crate::capacity`]).

use std::time::Instant;

use infera_proto::types::{Target, WorkerId};
use rand::Rng;

use super::RoutingCore;
use crate::capacity::Capacity;
use crate::ejection::{Breakers, EjectionPolicy, Failure, Health, Outcome, Transition};
use crate::target::TargetKey;

impl<R: Rng> RoutingCore<R> {
    /// Tells the breakers of `worker`'s targets that its engine is unreachable; the changes.
    pub fn engine_unreachable(&mut self, worker: &WorkerId, now: Instant) -> Vec<(Target, Transition)> {
        let Ok(keys) = self.view.worker_targets(worker, None) else { return Vec::new() };
        keys.into_iter()
            .filter_map(|k| {
                let t = self.breakers.observe(k, Outcome::Failure(Failure::EngineUnreachable), now)?;
                Some((self.view.slot(k).target.clone(), t))
            })
            .collect()
    }

    /// Sets the ejection thresholds (at start).
    pub fn set_ejection(&mut self, policy: EjectionPolicy) {
        self.breakers = Breakers::new(policy);
    }

    /// Sets the per-rank caps (at start).
    pub fn set_capacity(&mut self, caps: Capacity) {
        self.capacity = caps;
    }

    /// A target's health.
    pub fn health(&self, key: TargetKey, now: Instant) -> Health {
        self.breakers.health(key, now)
    }
}

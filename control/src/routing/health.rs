//! The core's side of outlier ejection ([`crate::ejection`]): the thresholds, a target's health,
//! and engines whose readings stopped; and the per-rank caps ([`crate::capacity`]).

use std::time::{Instant, SystemTime};

use infera_proto::types::{LegFailure, ReleaseReason, Target, WorkerId};
use rand::Rng;

use super::RoutingCore;
use crate::capacity::Capacity;
use crate::ejection::{
    Breakers, CarriedEjection, Ejection, EjectionPolicy, Failure, Health, Outcome, Transition,
};
use crate::identity::Identity;
use crate::target::TargetKey;

/// The quantile of the prefill phase a waiter's shedding is judged by: it is shed once even a
/// prefill as quick as one in ten could not bring its first token in time.
const QUICK_PHASE: f64 = 0.1;

/// What a reported leg did to the breakers.
#[derive(Debug, Default)]
pub(super) struct LegObserved {
    /// The targets ejected or re-admitted.
    pub(super) transitions: Vec<(Target, Transition)>,
    /// Failures that counted for nothing (another identity witnesses the target).
    pub(super) discounted: usize,
}

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

    /// Tells `target`'s breaker that its engine readings are frozen while it holds requests;
    /// the change, if any.
    pub fn engine_stuck(&mut self, target: &Target, now: Instant) -> Option<Transition> {
        let key = self.view.key(target)?;
        self.breakers.observe(key, Outcome::Failure(Failure::EngineStuck), now)
    }

    /// A leg on `key` that `reporter` booked ended: its outcome to the breakers, and what
    /// changed. A refused connection is the worker's (its ranks share one HTTP port): it counts
    /// against every rank of it, so a worker that stopped accepting is ejected whole as fast as
    /// one rank would be. A failure another identity's recent success contradicts counts for
    /// nothing ([`crate::ejection::witness`]).
    pub(super) fn observe_leg(
        &mut self,
        key: TargetKey,
        reason: ReleaseReason,
        failure: Option<LegFailure>,
        reporter: &Identity,
        now: Instant,
    ) -> LegObserved {
        let outcome = Outcome::of(reason, failure);
        let slot = self.view.slot(key);
        let keys = match failure {
            Some(LegFailure::Connect) => {
                self.view.worker_targets(&slot.worker.id, None).unwrap_or_else(|_| vec![key])
            }
            _ => vec![key],
        };
        let mut observed = LegObserved::default();
        for k in keys {
            let o = self.breakers.observe_reported(k, outcome, reporter, now);
            observed.discounted += usize::from(o.discounted);
            if let Some(t) = o.transition {
                observed.transitions.push((self.view.slot(k).target.clone(), t));
            }
        }
        observed
    }

    /// Every ejected or probing target at `now` (`wall`: the same moment on the wall clock), as
    /// the next leader is to carry them on.
    pub fn ejections(&self, now: Instant, wall: SystemTime) -> Vec<CarriedEjection> {
        self.breakers
            .ejections(now)
            .into_iter()
            .map(|(k, e)| CarriedEjection {
                target: self.view.slot(k).target.clone(),
                until: wall + (e.until - now),
                open: e.open,
            })
            .collect()
    }

    /// Carries on the ejections another leader persisted: each target is out until its `until`
    /// (probing once it is past), and one not registered yet is ejected when it registers.
    pub fn carry_ejections(&mut self, ejections: Vec<CarriedEjection>, now: Instant, wall: SystemTime) {
        for e in ejections {
            let until = now + e.until.duration_since(wall).unwrap_or_default();
            self.pending_ejections.insert(e.target, Ejection { until, open: e.open });
        }
        self.carry_pending_ejections();
    }

    /// Hands the carried ejections whose targets are registered now to their breakers.
    pub(super) fn carry_pending_ejections(&mut self) {
        let view = &self.view;
        let breakers = &mut self.breakers;
        self.pending_ejections.retain(|target, e| match view.key(target) {
            Some(k) => {
                breakers.carry(k, *e);
                false
            }
            None => true,
        });
    }

    /// Sets the ejection thresholds (at start).
    pub fn set_ejection(&mut self, policy: EjectionPolicy) {
        self.breakers = Breakers::new(policy);
    }

    /// Sets the per-rank caps (at start).
    pub fn set_capacity(&mut self, caps: Capacity) {
        self.capacity = caps;
    }

    /// Sets the decode workers' trusted step fits fleet admission predicts with (each fit).
    pub fn set_step_fits(&mut self, fits: crate::admission::StepFits) {
        self.step_fits = fits;
    }

    /// The median prefill phase of `model` so far: what a request admitted now still has to
    /// wait for its first token (`None` before any prefill ended).
    pub fn prefill_phase_median(
        &self,
        model: &infera_proto::types::ModelName,
    ) -> Option<std::time::Duration> {
        self.ledger.phases().median(model)
    }

    /// The prefill phase of `model` only one in ten so far was quicker than: the soonest a
    /// request admitted now can reasonably expect its first token (`None` before any ended).
    pub fn prefill_phase_quick(&self, model: &infera_proto::types::ModelName) -> Option<std::time::Duration> {
        self.ledger.phases().quantile(model, QUICK_PHASE)
    }

    /// A target's health.
    pub fn health(&self, key: TargetKey, now: Instant) -> Health {
        self.breakers.health(key, now)
    }
}

//! The record of a pick: each candidate's terms and the decision event built from them.

use std::time::SystemTime;

use infera_proto::types::{PickKind, PickRequest, RequestWeight, ReservationId};

use super::RoutingCore;
use crate::decisions::{CandidateTerms, Decision};
use crate::scoring::{Choice, Scored};
use crate::target::TargetKey;

impl<R> RoutingCore<R> {
    /// The sessions remembered for prefill affinity.
    pub fn sessions(&self) -> &crate::affinity::Sessions {
        &self.sessions
    }

    pub(super) fn terms(
        &self,
        scored: &Scored,
        affinity: Option<TargetKey>,
        kv_overflow: bool,
    ) -> CandidateTerms {
        let c = &scored.candidate;
        CandidateTerms {
            target: self.view.slot(c.key).target.clone(),
            load: c.load,
            cost: scored.cost,
            session_affinity: affinity == Some(c.key),
            overlap_pages: c.overlap_pages,
            cached_tokens: c.cached_tokens,
            kv_overflow,
            prefilling_weighted: c.prefilling,
            probe: c.probe,
        }
    }

    pub(super) fn decision(
        &self,
        kind: PickKind,
        req: &PickRequest,
        reservation: ReservationId,
        choice: &Choice,
        weight: RequestWeight,
        wall: SystemTime,
    ) -> Decision {
        let overflows = |i: usize| self.overflow.get(i).copied().unwrap_or(false);
        let candidates: Vec<CandidateTerms> = self
            .scored
            .iter()
            .enumerate()
            .map(|(i, c)| self.terms(c, choice.affinity, overflows(i)))
            .collect();
        let chosen = candidates[choice.index].clone();
        let suggested = choice.suggested.map(|i| candidates[i].target.clone());
        let min = candidates.iter().map(|c| c.cost).fold(f64::INFINITY, f64::min);
        Decision {
            at: wall,
            kind,
            request_id: req.request_id.clone(),
            reservation,
            model: req.model.clone(),
            mode: self.settings.mode,
            policy: self.settings.policy,
            agree: chosen.cost == min,
            chosen: chosen.target,
            suggested,
            weight,
            request_tokens: req.input_tokens,
            candidates,
        }
    }
}

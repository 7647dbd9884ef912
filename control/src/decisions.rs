//! Decision events: what each pick saw and chose, for `Admin.WatchDecisions` and the
//! `decode_demand` debug log.

use std::time::SystemTime;

use infera_proto::types::{
    DecodeInputDemand, DecodePolicy, ModelName, PickKind, RequestId, RequestWeight, ReservationId, Target,
};
use tokio::sync::broadcast;

use crate::target::{Load, WeightedPrefilling};

/// One candidate's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateTerms {
    /// The candidate target.
    pub target: Target,
    /// What it held before this pick.
    pub load: Load,
    /// Its cost (decode: demand cost; prefill: load score).
    pub cost: f64,
    /// Whether it was the session's previous prefill target.
    pub session_affinity: bool,
    /// Prefill: leading prompt pages the target holds.
    pub overlap_pages: u32,
    /// Prefill: prompt tokens those pages cover.
    pub cached_tokens: u64,
    /// Decode: its KV would overflow with this request, so the cost passed it by.
    pub kv_overflow: bool,
    /// Decode: `load.prefilling` as the cost weighed it by age (equal to it without the decay).
    pub prefilling_weighted: WeightedPrefilling,
    /// It is ejected and half-open: picking it is its one probe.
    pub probe: bool,
}

/// One routing decision.
#[derive(Clone, Debug)]
pub struct Decision {
    /// Wall-clock time of the pick.
    pub at: SystemTime,
    /// Prefill or decode.
    pub kind: PickKind,
    /// For which request.
    pub request_id: RequestId,
    /// The booking it made.
    pub reservation: ReservationId,
    /// The model the request asked for.
    pub model: ModelName,
    /// The demand mode in force.
    pub mode: DecodeInputDemand,
    /// The legacy policy in force.
    pub policy: DecodePolicy,
    /// The target chosen.
    pub chosen: Target,
    /// The lowest-cost target (when a cost was computed).
    pub suggested: Option<Target>,
    /// The chosen target's cost equals the lowest.
    pub agree: bool,
    /// W in force (zero for prefill picks).
    pub weight: RequestWeight,
    /// The request's input tokens.
    pub request_tokens: u64,
    /// Every eligible candidate, in pool order.
    pub candidates: Vec<CandidateTerms>,
}

/// Fan-out of decisions to watchers. Slow watchers lose the oldest events, never block picks.
#[derive(Debug, Clone)]
pub struct DecisionHub {
    tx: broadcast::Sender<std::sync::Arc<Decision>>,
}

impl DecisionHub {
    /// A hub keeping up to `capacity` undelivered events per watcher.
    pub fn new(capacity: usize) -> Self {
        Self { tx: broadcast::channel(capacity).0 }
    }

    /// Whether anyone is watching (events are only built then).
    pub fn watched(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Publishes an event.
    pub fn publish(&self, d: Decision) {
        // No receiver is not an error: nobody is watching.
        let _ = self.tx.send(std::sync::Arc::new(d));
    }

    /// A new watcher.
    pub fn subscribe(&self) -> broadcast::Receiver<std::sync::Arc<Decision>> {
        self.tx.subscribe()
    }
}

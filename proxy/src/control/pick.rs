//! [`Pick`]: the chosen target of one leg, released exactly once; [`PickError`]: why a pick found
//! nothing, and what the client is told.

use std::sync::Arc;

use infera_proto::types::{LegFailure, ModelName, ReleaseReason, Target};

use super::legs::{Booking, LegFacts, LegId};
use super::release::Releaser;
use crate::error::{Leg, ProxyError};
use crate::targets::Endpoint;

/// A chosen target for one leg. It is released exactly once: by [`Pick::release`], or — if
/// whatever holds it is dropped first (the client went away) — as `CANCELLED` on drop.
#[derive(Debug)]
pub struct Pick {
    /// Where the leg goes.
    pub endpoint: Endpoint,
    /// The leg in the releaser's registry (which holds control's booking, if any).
    leg: LegId,
    /// Control booked it when it was picked (else a local fallback).
    booked: bool,
    releaser: Arc<Releaser>,
    released: bool,
}

impl Pick {
    /// A leg starting on `endpoint`, booked as `booking` (`None`: a local pick).
    pub(super) fn new(
        releaser: &Arc<Releaser>,
        endpoint: Endpoint,
        facts: LegFacts,
        booking: Option<Booking>,
    ) -> Self {
        let booked = booking.is_some();
        let leg = releaser.start(&endpoint, facts, booking);
        Self { endpoint, leg, booked, releaser: releaser.clone(), released: false }
    }

    /// Whether control booked it when it was picked (false for a local fallback).
    pub fn booked(&self) -> bool {
        self.booked
    }

    /// Ends the leg with `reason`.
    pub fn release(mut self, reason: ReleaseReason) {
        self.end(reason, None);
    }

    /// Ends the leg as failed on its worker, saying how (outlier ejection counts it against
    /// the target).
    pub fn fail(mut self, failure: LegFailure) {
        self.end(ReleaseReason::Failed, Some(failure));
    }

    /// The target the leg runs on.
    pub fn target(&self) -> Target {
        self.endpoint.target()
    }

    fn end(&mut self, reason: ReleaseReason, failure: Option<LegFailure>) {
        if !std::mem::replace(&mut self.released, true) {
            self.releaser.release(&self.endpoint, self.leg, reason, failure);
        }
    }
}

impl Drop for Pick {
    fn drop(&mut self) {
        self.end(ReleaseReason::Cancelled, None);
    }
}

/// Why a pick found nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickError {
    /// No worker serves the model.
    UnknownModel,
    /// The model has no pool for this kind (a prefill pick on an aggregated model).
    NoPool,
    /// The pool has no eligible target.
    NoTarget,
    /// Control rejected the request's values (e.g. an input far beyond any context).
    Invalid(String),
    /// Every rank of the pool is at its cap in control: the request waits and picks again.
    AtCapacity,
    /// The model's prefills and decodes cannot pair (control's `NO_COMPATIBLE_PAIR`): why.
    NoCompatiblePair(String),
    /// Fleet admission has no room for the decode pick now: it waits in control's queue.
    Queued,
    /// Fleet admission shed it: its class's TTFT target can no longer be met.
    Shed,
    /// Control does not define the service class the request names: control's message.
    UnknownClass(String),
}

impl PickError {
    /// The client-facing error for a pick of `leg` for `model`.
    pub fn into_proxy_error(self, model: &ModelName, leg: Leg) -> ProxyError {
        match self {
            Self::UnknownModel => ProxyError::UnknownModel(model.clone()),
            Self::NoPool | Self::NoTarget => ProxyError::NoTarget { model: model.clone(), leg },
            Self::Invalid(_) => {
                ProxyError::BadRequest("the request exceeds what control accepts (input tokens)")
            }
            Self::NoCompatiblePair(why) => ProxyError::NoCompatiblePair(why),
            Self::AtCapacity => ProxyError::Overloaded {
                why: crate::error::Overload::AtCapacity,
                retry_after: std::time::Duration::from_secs(1),
            },
            // Queued is waited on by the route; reaching the client it reads as a shed.
            Self::Queued | Self::Shed => ProxyError::Overloaded {
                why: crate::error::Overload::Shed,
                retry_after: std::time::Duration::from_secs(1),
            },
            Self::UnknownClass(why) => ProxyError::UnknownServiceClass(why),
        }
    }
}

//! The prefill queue a decode pick's request would join, as fleet admission's prefill guard
//! reads it (`crate::admission::prefill_admits`) and as the ledger counts the prompt on its way
//! there ([`AwaitingPrefill`]).

use std::time::Instant;

use infera_proto::types::{PickKind, PickRequest};
use rand::Rng;

use super::candidates::credit_cached;
use super::{OverlapSource, RoutingCore};
use crate::ledger::AwaitingPrefill;

/// The prefill queue a decode pick's request would join ([`RoutingCore::pick_within`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct PrefillQueueNext {
    /// The tokens it would find there, its own included: what the prefill guard predicts from.
    pub(super) found: u64,
    /// Its own prefill there, counted on that queue until its request picks it.
    pub(super) awaiting: AwaitingPrefill,
}

impl<R: Rng> RoutingCore<R> {
    /// The prefill queue `req` would join: the prefill target where it finds the fewest tokens,
    /// the queue booked there and the prompts awaited there (decode picks admitted before
    /// their prefill pick) plus its own tokens less what that target is credited with caching
    /// of it (the KV index's pages, or its session's last prompt), as the prefill pick would
    /// credit and book it. `None` without a prefill pool.
    pub(super) fn prefill_queue_next(
        &mut self,
        req: &PickRequest,
        kv: Option<&dyn OverlapSource>,
        now: Instant,
    ) -> Option<PrefillQueueNext> {
        // The pick's own candidate buffer: the guard runs before the pick fills it.
        let ledger = &self.ledger;
        let prefills = &mut self.candidates;
        self.view.candidates(&req.model, PickKind::Prefill, |k| ledger.load(k), prefills).ok()?;
        let (sessions, ttl) = (&self.sessions, self.settings.session_ttl);
        let last = || req.session.as_ref().and_then(|s| sessions.last(s, now, ttl));
        credit_cached(prefills, &mut self.overlap, kv, last, req);
        prefills
            .iter()
            .map(|c| {
                let own = req.input_tokens.saturating_sub(c.cached_tokens);
                let queued = c.load.booked_input_tokens + ledger.awaiting_prefill_on(c.key);
                PrefillQueueNext {
                    found: queued + own,
                    awaiting: AwaitingPrefill { target: c.key, tokens: own },
                }
            })
            .min_by_key(|n| n.found)
    }
}

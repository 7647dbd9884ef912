//! The pure routing core: a synchronous, clock-injected state machine over the worker view, the
//! demand ledger, session affinity and the settings. One pick is a short pipeline:
//!
//! ```text
//! lease live? → candidates (view: pool of model × role, minus drained; ledger: loads)
//!             → choose (scoring: legacy policy / lowest cost / session affinity)
//!             → book (ledger) → Picked (+ decision event when someone watches)
//! ```
//!
//! [`RoutingCore`] is synchronous and owns no tasks or sockets; time and randomness come in
//! as arguments, so tests drive it deterministically. The gRPC shell holds it behind one
//! mutex: choosing and booking happen under the same lock, so no two concurrent picks see
//! the same stale load.

use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{
    DecodeInputDemand, DecodePolicy, DpRank, LeaseId, PickKind, PickRequest, Release, RequestWeight, Role,
    Target, WorkerId, WorkerRecord,
};
use rand::Rng;

use crate::admission::{AdmitLimit, PrefillGuard, StepFits};
use crate::affinity::{PickedPrefill, Sessions};
use crate::bounds::Bounds;
use crate::capacity::Capacity;
use crate::ejection::Breakers;
use crate::error::ControlError;
use crate::identity::Identity;
use crate::ledger::tags::IdTags;
use crate::ledger::{Booking, Ledger, Released, Reservation};
use crate::prefill_phase::is_phase_end;
use crate::scoring::{self, Candidate, RoundRobin, Scored};
use crate::settings::{OverlapCredit, Settings};
use crate::target::{KvRoom, Load, TargetKey};
use crate::view::View;

mod candidates;
mod health;
mod outcome;
mod overlaps;
mod prefill_queue;
mod record;
mod redeclare;
#[cfg(test)]
mod tests;
mod weights;

use candidates::{
    OverlapScratch, credit_cached, decay_prefilling, screen, skip_overflowing, within_capacity,
};
pub use outcome::{
    DrainHolding, Ended, LeaseExpired, LoadChange, OpenedLease, Picked, ReleaseEffect, ReleasedNow,
    ReservationRow, TargetRow,
};
pub use overlaps::{KvIndex, OverlapSource, Overlaps};
pub use redeclare::{Declared, Redeclared};
pub use weights::DecodeWeights;

/// Everything about one pick that is not the request: who asks, the KV index to credit overlaps
/// from, whether to record the full decision, and the clocks.
#[derive(Clone, Copy, Debug)]
pub struct PickContext<'a> {
    /// The caller: the pick's lease must be its own.
    pub caller: &'a Identity,
    /// The KV overlaps (prefill picks with page hashes are credited from them): the prefix index,
    /// or [`Overlaps`] computed before the pick; `None` credits none.
    pub kv: Option<&'a dyn OverlapSource>,
    /// Build the [`Decision`] (someone watches decisions or logs them).
    pub record_decision: bool,
    /// Monotonic now: lease liveness, session affinity.
    pub now: Instant,
    /// Wall-clock now: booking times and decision times shown to operators.
    pub wall: SystemTime,
    /// The decode targets' KV use (the engine readings); `None` checks no headroom.
    pub kv_room: Option<&'a dyn KvRoom>,
}

/// The pure routing core.
#[derive(Debug)]
pub struct RoutingCore<R> {
    view: View,
    ledger: Ledger,
    sessions: Sessions,
    settings: Settings,
    round_robin: RoundRobin,
    rng: R,
    /// Reused buffer: the eligible candidates of the current pick.
    candidates: Vec<Candidate>,
    /// Reused buffer: the same candidates with their costs.
    scored: Vec<Scored>,
    /// Reused buffers of the overlap query.
    overlap: OverlapScratch,
    /// Reused buffer: per decode candidate, whether its KV would overflow (empty: not checked).
    overflow: Vec<bool>,
    /// Pinned or fitted W, and the pools' fitted W.
    weights: DecodeWeights,
    /// Outlier ejection: every target's breaker.
    breakers: Breakers,
    /// Reused buffer: the keys of the targets a pick excludes.
    excluded: Vec<TargetKey>,
    /// Per-rank caps.
    capacity: Capacity,
    /// Ejections carried over from another leader whose targets have not registered yet.
    pending_ejections: std::collections::HashMap<infera_proto::types::Target, crate::ejection::Ejection>,
    /// The key of the ids' tags (kept for the ledger of each new term).
    tags: IdTags,
    /// What one identity may hold.
    bounds: Bounds,
    /// The decode workers' trusted step fits, for fleet admission.
    step_fits: StepFits,
    /// When fleet admission holds a lower class for the top class's first token.
    prefill_guard: PrefillGuard,
}

impl<R: Rng> RoutingCore<R> {
    /// A core over `view`; ids carry `epoch` and a tag keyed from the OS; `rng` breaks ties and
    /// drives the legacy policies.
    pub fn new(view: View, settings: Settings, epoch: u32, rng: R) -> Result<Self, ControlError> {
        settings.validate()?;
        let tags = IdTags::random();
        Ok(Self {
            view,
            ledger: Ledger::new(epoch, tags.clone()),
            tags,
            bounds: Bounds::default(),
            sessions: Sessions::default(),
            settings,
            round_robin: RoundRobin::default(),
            rng,
            candidates: Vec::new(),
            scored: Vec::new(),
            overlap: OverlapScratch::default(),
            overflow: Vec::new(),
            weights: DecodeWeights::default(),
            breakers: Breakers::default(),
            excluded: Vec::new(),
            capacity: Capacity::default(),
            pending_ejections: std::collections::HashMap::new(),
            step_fits: StepFits::default(),
            prefill_guard: PrefillGuard::default(),
        })
    }

    /// Picks and books a target for one request. Prefill picks that carry page hashes are credited
    /// with the overlap `kv` reports per candidate.
    pub fn pick(
        &mut self,
        kind: PickKind,
        req: &PickRequest,
        ctx: PickContext<'_>,
    ) -> Result<Picked, ControlError> {
        self.pick_within(kind, req, ctx, None)
    }

    /// [`RoutingCore::pick`] under fleet admission: a decode pick with `limit` books only a rank
    /// whose worker's predicted step stays within it and the held requests' ITL targets
    /// ([`crate::admission`]); `AdmissionQueued` when none does.
    pub fn pick_within(
        &mut self,
        kind: PickKind,
        req: &PickRequest,
        ctx: PickContext<'_>,
        limit: Option<AdmitLimit>,
    ) -> Result<Picked, ControlError> {
        let PickContext { caller, kv, record_decision, now, wall, kv_room } = ctx;
        self.ledger.check_lease(req.lease, caller, now)?;
        // Under the prefill guard every decode pick admission weighs foresees its prefill: a
        // lower class is held on it, and whichever is admitted counts on that prefill's queue
        // until its request picks it (`crate::ledger::AwaitingPrefill`).
        let awaiting_prefill = match (kind, limit) {
            (PickKind::Decode, Some(limit)) if self.prefill_guard == PrefillGuard::Queue => {
                let next = self.prefill_queue_next(req, kv, now);
                if let Some(ttft) = limit.protect_ttft_ms
                    && !crate::admission::prefill_admits(
                        &req.model,
                        next.map(|n| n.found),
                        &self.ledger,
                        ttft,
                    )
                {
                    return Err(ControlError::AdmissionQueued { model: req.model.clone() });
                }
                next.map(|n| n.awaiting)
            }
            _ => None,
        };
        let ledger = &self.ledger;
        let pool = self.view.candidates(&req.model, kind, |k| ledger.load(k), &mut self.candidates)?;
        self.excluded.clear();
        self.excluded.extend(req.exclude.iter().filter_map(|t| self.view.key(t)));
        let screened = screen(&mut self.candidates, &self.breakers, &self.excluded, now);
        if !within_capacity(&mut self.candidates, &self.capacity, &self.view, kv_room) {
            // Under fleet admission a full pool queues the pick in control, in its order.
            return Err(match (kind, limit) {
                (PickKind::Decode, Some(_)) => ControlError::AdmissionQueued { model: req.model.clone() },
                _ => ControlError::AtCapacity { model: req.model.clone(), kind },
            });
        }
        if let (PickKind::Decode, Some(limit)) = (kind, limit)
            && !crate::admission::within_predicted_itl(
                &mut self.candidates,
                &self.view,
                &self.ledger,
                &self.step_fits,
                limit,
                req.input_tokens,
            )
        {
            return Err(ControlError::AdmissionQueued { model: req.model.clone() });
        }
        if kind == PickKind::Prefill {
            let (sessions, ttl) = (&self.sessions, self.settings.session_ttl);
            let last = || req.session.as_ref().and_then(|s| sessions.last(s, now, ttl));
            credit_cached(&mut self.candidates, &mut self.overlap, kv, last, req);
        }
        if let (PickKind::Decode, DecodePolicy::LeastRunning, Some(engines)) =
            (kind, self.settings.policy, kv_room)
        {
            for c in &mut self.candidates {
                c.engine_requests = engines.engine_requests(&self.view.slot(c.key).target);
            }
        }
        if kind == PickKind::Decode {
            // The median prefill phase prefilling decode reservations are aged against (the age
            // decay, `crate::prefill_phase`); `None` with the decay off: they count whole.
            let median = self
                .settings
                .prefilling_age_decay
                .is_on()
                .then(|| self.ledger.phases().median(&req.model))
                .flatten();
            decay_prefilling(&mut self.candidates, &self.ledger, median, now);
        }
        // The W of this pick: pinned, or the pool's fitted W (auto).
        let weight = match kind {
            PickKind::Decode => self.weights.for_pool(&req.model, self.settings.weight),
            PickKind::Prefill => RequestWeight::ZERO,
        };
        let settings = Settings { weight, ..self.settings.clone() };
        scoring::score(kind, &settings, req.input_tokens, &self.candidates, &mut self.scored);
        self.overflow.clear();
        if let (PickKind::Decode, Some(room)) = (kind, kv_room) {
            skip_overflowing(&self.view, room, req.input_tokens, &mut self.scored, &mut self.overflow);
        }
        let pool = self.round_robin.cursor(pool);
        let choice = match kind {
            PickKind::Decode => scoring::choose_decode(&settings, &self.scored, pool, &mut self.rng),
            PickKind::Prefill => scoring::choose_prefill(
                &settings,
                &self.sessions,
                &self.scored,
                req,
                pool,
                now,
                &mut self.rng,
            ),
        };
        let scored = self.scored[choice.index];
        let chosen = scored.candidate;
        // A prefill books the tokens it has to compute: what the target does not hold already.
        let booking = Booking {
            kind,
            target: chosen.key,
            request_id: req.request_id.clone(),
            model: req.model.clone(),
            input_tokens: req.input_tokens - chosen.cached_tokens,
            age: Duration::ZERO,
            itl_limit_ms: limit.filter(|_| kind == PickKind::Decode).map(|l| l.itl_ms),
            awaiting_prefill,
        };
        let (reservation, load) = self.ledger.book(req.lease, caller, booking, now, wall)?;
        self.breakers.picked(chosen.key, now);
        if let (PickKind::Prefill, Some(session)) = (kind, &req.session) {
            let at = PickedPrefill { target: chosen.key, seq: reservation.seq, tokens: req.input_tokens };
            self.sessions.picked(session.clone(), at);
        }
        let decision = record_decision.then(|| self.decision(kind, req, reservation, &choice, weight, wall));
        let slot = self.view.slot(chosen.key);
        Ok(Picked {
            reservation,
            worker: slot.worker.clone(),
            chosen: self.terms(
                &scored,
                choice.affinity,
                self.overflow.get(choice.index).copied().unwrap_or(false),
            ),
            mode: self.settings.mode,
            weight,
            agree: choice.agree,
            change: self.change(chosen.key, load),
            decision,
            bypassed_ejections: screened.bypassed,
            best_cached_tokens: self.candidates.iter().map(|c| c.cached_tokens).max().unwrap_or(0),
        })
    }

    /// Ends `caller`'s reservation for its reason (a failed leg: with how it failed) at `now`;
    /// `None` when it had already ended. The outcome goes to its target's breaker as `caller`'s
    /// report.
    pub fn release(
        &mut self,
        release: Release,
        caller: &Identity,
        now: Instant,
    ) -> Result<Option<ReleasedNow>, ControlError> {
        let Release { id, reason, failure } = release;
        Ok(match self.ledger.release(id, caller, reason, now)? {
            Released::Now(r, load) => {
                let computed = is_phase_end(r.kind, reason);
                if r.kind == PickKind::Prefill {
                    self.sessions.ended(r.id.seq, computed, now, self.settings.session_max);
                }
                let phase_median = computed
                    .then(|| self.ledger.phases().median(&r.model).map(|m| (r.model.clone(), m)))
                    .flatten();
                let observed = self.observe_leg(r.target, reason, failure, caller, now);
                Some(ReleasedNow {
                    kind: r.kind,
                    change: self.change(r.target, load),
                    phase_median,
                    health: observed.transitions,
                    discounted: observed.discounted,
                })
            }
            Released::Already => None,
        })
    }

    /// Opens a lease of `owner`; `ttl` zero means the default, others are clamped to the range.
    /// Refused when `owner` holds as many as [`Bounds::leases_per_identity`].
    pub fn open_lease(
        &mut self,
        holder: String,
        owner: &Identity,
        ttl: Duration,
        now: Instant,
    ) -> Result<OpenedLease, ControlError> {
        let max = self.bounds.leases_per_identity;
        if self.ledger.leases_of(owner) >= max {
            return Err(ControlError::TooManyLeases { identity: owner.clone(), max });
        }
        let (lo, hi) = Settings::LEASE_TTL_RANGE;
        let ttl = if ttl.is_zero() { self.settings.lease_ttl } else { ttl.clamp(lo, hi) };
        Ok(OpenedLease { lease: self.ledger.open_lease(holder, owner.clone(), ttl, now), ttl })
    }

    /// Renews `caller`'s lease.
    pub fn keep_alive(
        &mut self,
        lease: LeaseId,
        caller: &Identity,
        now: Instant,
    ) -> Result<Duration, ControlError> {
        self.ledger.keep_alive(lease, caller, now)
    }

    /// Ends `caller`'s lease and what it holds.
    pub fn close_lease(
        &mut self,
        lease: LeaseId,
        caller: &Identity,
        now: Instant,
    ) -> Result<Vec<Ended>, ControlError> {
        let released = self.ledger.close_lease(lease, caller, now)?;
        Ok(self.ended(released, now))
    }

    /// Sets when fleet admission holds a lower class for the top class's first token (at start).
    pub fn set_prefill_guard(&mut self, guard: PrefillGuard) {
        self.prefill_guard = guard;
    }

    /// Sets the bounds per identity (at start).
    pub fn set_bounds(&mut self, bounds: Bounds) {
        self.bounds = bounds;
    }

    /// Expires overdue leases, releasing what they hold.
    pub fn tick(&mut self, now: Instant) -> Vec<LeaseExpired> {
        self.ledger
            .expire(now)
            .into_iter()
            .map(|e| LeaseExpired {
                lease: e.lease,
                holder: e.holder,
                owner: e.owner,
                ended: self.ended(e.released, now),
            })
            .collect()
    }

    /// Forgets sessions idle for the session TTL.
    pub fn sweep_sessions(&mut self, now: Instant) {
        self.sessions.sweep(now, self.settings.session_ttl);
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Sets W; effective from the next pick.
    pub fn set_weight(&mut self, weight: RequestWeight) -> Result<&Settings, ControlError> {
        self.update(Settings { weight, ..self.settings.clone() })
    }

    /// Pinned or fitted W, and the pools' fitted W.
    pub fn weights(&self) -> &DecodeWeights {
        &self.weights
    }

    /// Changes how W is chosen or the pools' fitted W; effective from the next pick.
    pub fn weights_mut(&mut self) -> &mut DecodeWeights {
        &mut self.weights
    }

    /// Sets the demand mode; effective from the next pick.
    pub fn set_mode(&mut self, mode: DecodeInputDemand) -> Result<&Settings, ControlError> {
        self.update(Settings { mode, ..self.settings.clone() })
    }

    /// Sets the prefill overlap credit; it applies from the next pick.
    pub fn set_overlap_credit(&mut self, overlap_credit: OverlapCredit) -> Result<&Settings, ControlError> {
        self.update(Settings { overlap_credit, ..self.settings.clone() })
    }

    /// Drains (or resumes) a worker's targets, all ranks or one. Returns the targets touched.
    pub fn set_drained(
        &mut self,
        worker: &WorkerId,
        rank: Option<DpRank>,
        drained: bool,
    ) -> Result<Vec<TargetKey>, ControlError> {
        let keys = self.view.worker_targets(worker, rank)?;
        self.view.set_drained(&keys, drained);
        Ok(keys)
    }

    /// The workers whose registrars asked for a drain (`/infera/v1/drains/`): they take no new
    /// picks. Returns the workers whose drain began or ended.
    pub fn set_draining(&mut self, workers: std::collections::BTreeSet<WorkerId>) -> Vec<WorkerId> {
        self.view.set_draining(workers)
    }

    /// What each registered worker being drained still holds.
    pub fn drain_holdings(&self) -> Vec<DrainHolding> {
        self.view
            .draining_workers()
            .into_iter()
            .map(|(worker, keys)| DrainHolding {
                worker,
                held_requests: keys.iter().map(|k| self.ledger.load(*k).held_requests).sum(),
            })
            .collect()
    }

    /// Live targets (filtered) with their loads and health at `now`.
    pub fn targets(&self, model: Option<&str>, role: Option<Role>, now: Instant) -> Vec<TargetRow> {
        self.view
            .live_targets()
            .into_iter()
            .map(|k| (self.view.slot(k), k))
            .filter(|(s, _)| model.is_none_or(|m| s.worker.model.as_str() == m))
            .filter(|(s, _)| role.is_none_or(|r| s.worker.role == r))
            .map(|(s, k)| TargetRow {
                slot: s.clone(),
                load: self.ledger.load(k),
                health: self.health(k, now),
                itl_limit_ms: self.ledger.tightest_itl_ms(k),
            })
            .collect()
    }

    /// Some targets' rows, by key, at `now`.
    pub fn target_rows(&self, keys: &[TargetKey], now: Instant) -> Vec<TargetRow> {
        keys.iter()
            .map(|k| TargetRow {
                slot: self.view.slot(*k).clone(),
                load: self.ledger.load(*k),
                health: self.health(*k, now),
                itl_limit_ms: self.ledger.tightest_itl_ms(*k),
            })
            .collect()
    }

    /// Live reservations (filtered), in booking order.
    pub fn reservations(&self, lease: Option<LeaseId>, worker: Option<&str>) -> Vec<ReservationRow> {
        self.ledger
            .reservations()
            .into_iter()
            .filter(|r| lease.is_none_or(|l| r.lease == l))
            .map(|r| (r, self.view.slot(r.target)))
            .filter(|(_, s)| worker.is_none_or(|w| s.target.worker.as_str() == w))
            .map(|(r, s)| {
                let lease = self.ledger.lease_of(r);
                ReservationRow {
                    reservation: r.clone(),
                    target: s.target.clone(),
                    holder: lease.map(|l| l.holder.clone()).unwrap_or_default(),
                    owner: lease.map(|l| l.owner.clone()),
                }
            })
            .collect()
    }

    /// The sum of all loads (zero when nothing is held).
    pub fn total_load(&self) -> Load {
        self.ledger.total()
    }

    /// Open leases.
    pub fn lease_count(&self) -> usize {
        self.ledger.lease_count()
    }

    /// Open leases of `owner`.
    pub fn leases_of(&self, owner: &Identity) -> usize {
        self.ledger.leases_of(owner)
    }

    /// A target's key, if it was ever registered.
    pub fn target_key(&self, target: &Target) -> Option<TargetKey> {
        self.view.key(target)
    }

    /// The worker view.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// Adds or replaces a worker (a registry change).
    pub fn upsert_worker(&mut self, record: WorkerRecord) {
        self.view.upsert(record);
        self.round_robin.retain(self.view.pool_ids());
        self.carry_pending_ejections();
    }

    /// The view's PD pairing changes since the last call ([`View::take_pairing_changes`]).
    pub fn take_pairing_changes(&mut self) -> Vec<crate::view::PairingChange> {
        self.view.take_pairing_changes()
    }

    /// Removes a worker (a registry change); its targets stop taking picks. Returns whether it was
    /// known.
    pub fn remove_worker(&mut self, id: &WorkerId) -> bool {
        let known = self.view.remove(id);
        self.round_robin.retain(self.view.pool_ids());
        known
    }

    fn update(&mut self, next: Settings) -> Result<&Settings, ControlError> {
        next.validate()?;
        self.settings = next;
        Ok(&self.settings)
    }

    fn change(&self, key: TargetKey, load: Load) -> LoadChange {
        let slot = self.view.slot(key);
        LoadChange { target: slot.target.clone(), role: slot.worker.role, load }
    }

    /// What a lease's end released at `now`; a session's prefill among it is not known to have
    /// computed anything.
    fn ended(&mut self, released: Vec<(Reservation, Load)>, now: Instant) -> Vec<Ended> {
        for (r, _) in &released {
            if r.kind == PickKind::Prefill {
                self.sessions.ended(r.id.seq, false, now, self.settings.session_max);
            }
        }
        released
            .into_iter()
            .map(|(reservation, load)| Ended { change: self.change(reservation.target, load), reservation })
            .collect()
    }
}

//! The demand ledger: who holds what, per target. Pure and synchronous; time is passed in.
//!
//! A pick books a [`Reservation`] of `input_tokens` on one target under one proxy lease. The
//! target's [`Load`] is the sum over its live reservations: booked input tokens and held
//! requests. A reservation ends exactly once — by `release` (EOF, cancellation, failure,
//! target removal) or by the expiry of its lease — and a second release of the same id is a
//! no-op that reports [`Released::Already`]. Ids carry the issuing epoch, a sequence and a tag
//! ([`tags`]), so "released before" and "never issued here" are told apart without keeping
//! tombstones, and an id cannot be guessed.
//!
//! Every lease belongs to the [`Identity`] that opened it, and so does every reservation booked
//! under it: a caller names only its own. Another identity's lease or live reservation is
//! refused as if it did not exist ([`ControlError::ForeignLease`],
//! [`ControlError::ForeignReservation`], answered as `NOT_FOUND` like an unknown id) and nothing
//! changes.
//!
//! The ledger also measures the prefill phase: a prefill reservation's end of stream, minus
//! its booking, is one sample of how long its model's prefills take ([`PhaseWindows`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{LeaseId, ModelName, PickKind, ReleaseReason, RequestId, ReservationId};

use crate::error::ControlError;
use crate::identity::Identity;
use crate::prefill_phase::{PhaseWindows, age_weight, is_phase_end};
use crate::target::{Load, Prefilling, TargetKey, WeightedPrefilling};

mod awaiting;
mod itl_limits;
mod prefilling;
pub mod tags;
#[cfg(test)]
mod tests;

use awaiting::AwaitingIndex;
pub use awaiting::AwaitingPrefill;
use itl_limits::AdmitLimits;
pub use prefilling::PrefillingEntry;
use prefilling::PrefillingIndex;
use tags::{IdKind, IdTags};

/// One booking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Its id, which the proxy releases it by.
    pub id: ReservationId,
    /// The lease it belongs to.
    pub lease: LeaseId,
    /// Prefill or decode leg.
    pub kind: PickKind,
    /// Where it is booked.
    pub target: TargetKey,
    /// The request it was booked for.
    pub request_id: RequestId,
    /// The model the request asked for.
    pub model: ModelName,
    /// Input tokens charged to the target.
    pub input_tokens: u64,
    /// Wall-clock time of the booking (for operators).
    pub booked_at: SystemTime,
    /// Monotonic time of the booking: the prefill phase and the prefilling age are measured
    /// from it.
    pub booked: Instant,
    /// A decode reservation whose request still holds a prefill reservation.
    pub prefilling: bool,
    /// The ITL target (ms) of the class it was admitted under, when admission weighed it.
    pub itl_limit_ms: Option<u32>,
    /// The input tokens its target held when it was booked, plus its own: the queue a prefill
    /// joined ([`crate::admission::prefill_fit`]).
    pub found_tokens: u64,
}

/// The outcome of a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released {
    /// This call ended the reservation; the target's load after it.
    Now(Reservation, Load),
    /// An earlier release (or lease expiry) ended it; nothing changed.
    Already,
}

/// A proxy's lease.
#[derive(Clone, Debug)]
pub struct LeaseState {
    /// Who holds it (the proxy's name, as it gave it).
    pub holder: String,
    /// The identity that opened it: it alone may use it and its reservations.
    pub owner: Identity,
    /// Time to live, renewed by each keep-alive.
    pub ttl: Duration,
    /// When it expires unless renewed.
    pub expires_at: Instant,
    reservations: HashSet<u64>,
}

/// A lease that expired, with the reservations its expiry released.
#[derive(Debug)]
pub struct Expired {
    /// The lease that ran out.
    pub lease: LeaseId,
    /// The proxy that held it (its name, for the log).
    pub holder: String,
    /// The identity that owned it.
    pub owner: Identity,
    /// The reservations it still held, each with its target's load after the release.
    pub released: Vec<(Reservation, Load)>,
}

/// The demand ledger: the reservations and leases, and the load they put on each target.
#[derive(Debug)]
pub struct Ledger {
    epoch: u32,
    /// The key of this process's id tags.
    tags: IdTags,
    /// Open leases per owner.
    leases_of: HashMap<Identity, usize>,
    last_reservation: u64,
    last_lease: u64,
    loads: Vec<Load>,
    reservations: HashMap<u64, Reservation>,
    leases: HashMap<u64, LeaseState>,
    /// The live reservation of each leg by request id (the first, when a client reuses an id
    /// concurrently): how a decode reservation learns that its request is still in prefill.
    legs: HashMap<(PickKind, RequestId), u64>,
    /// The prefilling decode reservations per target, with their ages and tokens.
    prefilling: PrefillingIndex,
    /// The completed prefill phases per model.
    phases: PhaseWindows,
    /// The ITL targets of the held reservations, per target.
    itl_limits: AdmitLimits,
    /// The prefill phase against the queue each prefill joined, per model.
    prefill_fits: crate::admission::prefill_fit::PrefillFits,
    /// Decode reservations admitted before their request picked its prefill.
    awaiting: AwaitingIndex,
}

impl Ledger {
    /// An empty ledger whose ids carry `epoch` and tags made with `tags`.
    pub fn new(epoch: u32, tags: IdTags) -> Self {
        Self {
            epoch,
            tags,
            leases_of: HashMap::new(),
            last_reservation: 0,
            last_lease: 0,
            loads: Vec::new(),
            reservations: HashMap::new(),
            leases: HashMap::new(),
            legs: HashMap::new(),
            prefilling: PrefillingIndex::default(),
            phases: PhaseWindows::default(),
            itl_limits: AdmitLimits::default(),
            prefill_fits: Default::default(),
            awaiting: AwaitingIndex::default(),
        }
    }

    /// The epoch stamped into this ledger's ids.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// A target's load (zero for a target never booked).
    pub fn load(&self, target: TargetKey) -> Load {
        self.loads.get(target.index()).copied().unwrap_or_default()
    }

    /// Opens a lease of `owner` that expires `ttl` after `now` unless renewed.
    pub fn open_lease(&mut self, holder: String, owner: Identity, ttl: Duration, now: Instant) -> LeaseId {
        self.last_lease += 1;
        *self.leases_of.entry(owner.clone()).or_default() += 1;
        let state = LeaseState { holder, owner, ttl, expires_at: now + ttl, reservations: HashSet::new() };
        self.leases.insert(self.last_lease, state);
        let seq = self.last_lease;
        LeaseId { epoch: self.epoch, seq, tag: self.tags.tag(IdKind::Lease, self.epoch, seq) }
    }

    /// How many leases `owner` holds (open, or expired and not reaped yet).
    pub fn leases_of(&self, owner: &Identity) -> usize {
        self.leases_of.get(owner).copied().unwrap_or(0)
    }

    /// Renews a live lease of `caller`; an unknown or already expired one is `UnknownLease`,
    /// another identity's `ForeignLease`.
    pub fn keep_alive(
        &mut self,
        lease: LeaseId,
        caller: &Identity,
        now: Instant,
    ) -> Result<Duration, ControlError> {
        let state = self.live_lease(lease, caller, now)?;
        state.expires_at = now + state.ttl;
        Ok(state.ttl)
    }

    /// Ends a lease of `caller` at once, releasing everything it holds.
    pub fn close_lease(
        &mut self,
        lease: LeaseId,
        caller: &Identity,
        now: Instant,
    ) -> Result<Vec<(Reservation, Load)>, ControlError> {
        self.live_lease(lease, caller, now)?;
        let state = self.remove_lease(lease.seq).expect("checked live above");
        Ok(self.release_all(state.reservations))
    }

    /// Books `input_tokens` on `target` under `caller`'s `lease`, as of `booking.age` before
    /// `now`. Returns the new reservation's id and the target's load after the booking.
    pub fn book(
        &mut self,
        lease: LeaseId,
        caller: &Identity,
        booking: Booking,
        now: Instant,
        wall: SystemTime,
    ) -> Result<(ReservationId, Load), ControlError> {
        let seq = self.last_reservation + 1;
        self.live_lease(lease, caller, now)?.reservations.insert(seq);
        self.last_reservation = seq;
        let id = ReservationId {
            epoch: self.epoch,
            seq,
            tag: self.tags.tag(IdKind::Reservation, self.epoch, seq),
        };
        let i = booking.target.index();
        if self.loads.len() <= i {
            self.loads.resize(i + 1, Load::default());
        }
        let load = &mut self.loads[i];
        let found_tokens = load.booked_input_tokens + booking.input_tokens;
        load.booked_input_tokens += booking.input_tokens;
        load.held_requests += 1;
        let reservation = Reservation {
            id,
            lease,
            kind: booking.kind,
            target: booking.target,
            request_id: booking.request_id,
            model: booking.model,
            input_tokens: booking.input_tokens,
            booked_at: wall.checked_sub(booking.age).unwrap_or(wall),
            booked: now.checked_sub(booking.age).unwrap_or(now),
            prefilling: false,
            itl_limit_ms: booking.itl_limit_ms,
            found_tokens,
        };
        if let Some(ms) = booking.itl_limit_ms {
            self.itl_limits.add(booking.target, ms);
        }
        // Only the leg registered for its request id takes part in the phase: a second live
        // leg of the same id (a client reusing x-request-id) is not marked, so that the
        // registered prefill's end always unmarks whatever it marked.
        let registered =
            *self.legs.entry((reservation.kind, reservation.request_id.clone())).or_insert(seq) == seq;
        let other = match reservation.kind {
            PickKind::Decode => PickKind::Prefill,
            PickKind::Prefill => PickKind::Decode,
        };
        let other = self.legs.get(&(other, reservation.request_id.clone())).copied();
        self.reservations.insert(seq, reservation);
        // A decode whose request's prefill is live (booked before or after it) is prefilling;
        // one booked first awaits its prefill until that is booked.
        match (booking.kind, other) {
            (PickKind::Decode, Some(_)) if registered => self.mark_prefilling(seq, true),
            (PickKind::Decode, None) if registered => {
                if let Some(prefill) = booking.awaiting_prefill {
                    self.awaiting.add(seq, prefill);
                }
            }
            (PickKind::Prefill, Some(decode)) if registered => {
                self.awaiting.remove(decode);
                self.mark_prefilling(decode, true);
            }
            _ => {}
        }
        Ok((id, self.loads[i]))
    }

    /// Sets whether decode reservation `seq` is still in prefill, keeping its target's
    /// [`Prefilling`] equal to the sum over its marked reservations.
    fn mark_prefilling(&mut self, seq: u64, on: bool) {
        let Some(r) = self.reservations.get_mut(&seq) else { return };
        if r.kind != PickKind::Decode || r.prefilling == on {
            return;
        }
        r.prefilling = on;
        let load = &mut self.loads[r.target.index()];
        if on {
            let entry = PrefillingEntry { booked: r.booked, tokens: r.input_tokens };
            self.prefilling.add(load, r.target, seq, entry);
        } else {
            self.prefilling.remove(load, r.target, seq);
        }
    }

    /// Ends `caller`'s reservation for `reason` at `now`. Idempotent: a reservation ended before
    /// gives [`Released::Already`]; an id this ledger never issued (a wrong tag too) is
    /// `UnknownReservation`; another identity's live reservation is `ForeignReservation` and
    /// stays. A prefill that reached its end of stream is one sample of its model's prefill
    /// phase; cancelled or failed ones are not (they did not finish), nor are those a lease
    /// expiry ends.
    pub fn release(
        &mut self,
        id: ReservationId,
        caller: &Identity,
        reason: ReleaseReason,
        now: Instant,
    ) -> Result<Released, ControlError> {
        if id.epoch != self.epoch
            || id.seq > self.last_reservation
            || id.tag != self.tags.tag(IdKind::Reservation, id.epoch, id.seq)
        {
            return Err(ControlError::UnknownReservation(id));
        }
        let Some(reservation) = self.reservations.get(&id.seq) else {
            return Ok(Released::Already);
        };
        if self.leases.get(&reservation.lease.seq).is_some_and(|l| &l.owner != caller) {
            return Err(ControlError::ForeignReservation(id));
        }
        let reservation = self.reservations.remove(&id.seq).expect("found above");
        if let Some(lease) = self.leases.get_mut(&reservation.lease.seq) {
            lease.reservations.remove(&id.seq);
        }
        let load = self.unbook(&reservation);
        if is_phase_end(reservation.kind, reason) {
            let phase = now.saturating_duration_since(reservation.booked);
            self.phases.record(&reservation.model, phase);
            self.prefill_fits.observe(
                &reservation.model,
                reservation.found_tokens,
                phase.as_secs_f64() * 1e3,
            );
        }
        Ok(Released::Now(reservation, load))
    }

    /// Removes every lease whose deadline has passed and releases what they held.
    pub fn expire(&mut self, now: Instant) -> Vec<Expired> {
        let due: Vec<u64> =
            self.leases.iter().filter(|(_, s)| s.expires_at <= now).map(|(seq, _)| *seq).collect();
        due.into_iter()
            .map(|seq| {
                let state = self.remove_lease(seq).expect("collected from the map");
                Expired {
                    lease: LeaseId {
                        epoch: self.epoch,
                        seq,
                        tag: self.tags.tag(IdKind::Lease, self.epoch, seq),
                    },
                    holder: state.holder,
                    owner: state.owner,
                    released: self.release_all(state.reservations),
                }
            })
            .collect()
    }

    /// Live reservations, in booking order.
    pub fn reservations(&self) -> Vec<&Reservation> {
        let mut all: Vec<&Reservation> = self.reservations.values().collect();
        all.sort_by_key(|r| r.id.seq);
        all
    }

    /// A live lease's state, if any (whoever owns it).
    pub fn lease(&self, lease: LeaseId) -> Option<&LeaseState> {
        let ours =
            lease.epoch == self.epoch && lease.tag == self.tags.tag(IdKind::Lease, lease.epoch, lease.seq);
        ours.then(|| self.leases.get(&lease.seq)).flatten()
    }

    /// The state of the lease a reservation is booked under (its owner, its holder).
    pub fn lease_of(&self, r: &Reservation) -> Option<&LeaseState> {
        self.leases.get(&r.lease.seq)
    }

    /// The target's decode reservations still in prefill (as many as its
    /// `load.prefilling.requests`).
    pub fn prefilling_on(&self, target: TargetKey) -> impl Iterator<Item = &PrefillingEntry> {
        self.prefilling.on(target)
    }

    /// The target's prefilling decode reservations, each counted by its age against the
    /// model's `median` prefill phase (`crate::prefill_phase::age_weight`; `None`: whole).
    pub fn prefilling_weighted(
        &self,
        target: TargetKey,
        median: Option<Duration>,
        now: Instant,
    ) -> WeightedPrefilling {
        let mut weighted = WeightedPrefilling::default();
        for e in self.prefilling_on(target) {
            let w = age_weight(now.saturating_duration_since(e.booked), median);
            weighted.requests += w;
            weighted.tokens += w * e.tokens as f64;
        }
        weighted
    }

    /// How long the prefill phases of each model took (their EOF releases).
    pub fn phases(&self) -> &PhaseWindows {
        &self.phases
    }

    /// The prefill phase against the queue each prefill joined, per model.
    pub fn prefill_fits(&self) -> &crate::admission::prefill_fit::PrefillFits {
        &self.prefill_fits
    }

    /// The prompt tokens expected on prefill target `target` from requests whose decode was
    /// admitted before they picked their prefill ([`AwaitingPrefill`]).
    pub fn awaiting_prefill_on(&self, target: TargetKey) -> u64 {
        self.awaiting.tokens_on(target)
    }

    /// How many decode reservations await their request's prefill pick.
    #[cfg(test)]
    pub(crate) fn awaiting_prefills(&self) -> usize {
        self.awaiting.len()
    }

    /// The tightest ITL target (ms) among the requests `target` holds under admission.
    pub fn tightest_itl_ms(&self, target: TargetKey) -> Option<u32> {
        self.itl_limits.tightest(target)
    }

    /// Whether `holder` holds a lease (open, expired or not yet reaped).
    pub fn has_lease_of(&self, holder: &str) -> bool {
        self.leases.values().any(|l| l.holder == holder)
    }

    /// Number of open leases.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// The sum of all loads: zero exactly when nothing is held.
    pub fn total(&self) -> Load {
        self.loads.iter().fold(Load::default(), |acc, l| Load {
            booked_input_tokens: acc.booked_input_tokens + l.booked_input_tokens,
            held_requests: acc.held_requests + l.held_requests,
            prefilling: Prefilling {
                requests: acc.prefilling.requests + l.prefilling.requests,
                tokens: acc.prefilling.tokens + l.prefilling.tokens,
            },
        })
    }

    /// Whether a lease is live at `now` and `caller`'s. A lease past its deadline is dead even
    /// before the reaper (`expire`) has released its reservations.
    pub fn check_lease(&self, lease: LeaseId, caller: &Identity, now: Instant) -> Result<(), ControlError> {
        match self.lease(lease) {
            Some(state) if state.expires_at > now && &state.owner == caller => Ok(()),
            Some(state) if state.expires_at > now => Err(ControlError::ForeignLease(lease)),
            _ => Err(ControlError::UnknownLease(lease)),
        }
    }

    fn live_lease(
        &mut self,
        lease: LeaseId,
        caller: &Identity,
        now: Instant,
    ) -> Result<&mut LeaseState, ControlError> {
        self.check_lease(lease, caller, now)?;
        Ok(self.leases.get_mut(&lease.seq).expect("checked live above"))
    }

    /// Takes a lease out of the book and its owner's count.
    fn remove_lease(&mut self, seq: u64) -> Option<LeaseState> {
        let state = self.leases.remove(&seq)?;
        if let Some(n) = self.leases_of.get_mut(&state.owner) {
            *n -= 1;
            if *n == 0 {
                self.leases_of.remove(&state.owner);
            }
        }
        Some(state)
    }

    fn release_all(&mut self, seqs: HashSet<u64>) -> Vec<(Reservation, Load)> {
        let mut seqs: Vec<u64> = seqs.into_iter().collect();
        seqs.sort_unstable();
        let mut released = Vec::with_capacity(seqs.len());
        for seq in seqs {
            if let Some(r) = self.reservations.remove(&seq) {
                let load = self.unbook(&r);
                released.push((r, load));
            }
        }
        released
    }

    fn unbook(&mut self, r: &Reservation) -> Load {
        let key = (r.kind, r.request_id.clone());
        if self.legs.get(&key) == Some(&r.id.seq) {
            self.legs.remove(&key);
            // The prefill leg ended: its request's decode now waits for, or decodes, its KV.
            if r.kind == PickKind::Prefill
                && let Some(&decode) = self.legs.get(&(PickKind::Decode, r.request_id.clone()))
            {
                self.mark_prefilling(decode, false);
            }
        }
        if let Some(ms) = r.itl_limit_ms {
            self.itl_limits.remove(r.target, ms);
        }
        if r.kind == PickKind::Decode {
            self.awaiting.remove(r.id.seq);
        }
        let load = &mut self.loads[r.target.index()];
        if r.prefilling {
            self.prefilling.remove(load, r.target, r.id.seq);
        }
        // A reservation only ever subtracts what its own booking added, so these cannot
        // underflow; checked arithmetic turns a broken invariant into a loud failure.
        load.booked_input_tokens = load
            .booked_input_tokens
            .checked_sub(r.input_tokens)
            .expect("ledger invariant: booked tokens never go negative");
        load.held_requests =
            load.held_requests.checked_sub(1).expect("ledger invariant: held requests never go negative");
        *load
    }
}

/// What a pick books.
#[derive(Clone, Debug)]
pub struct Booking {
    /// Prefill or decode leg.
    pub kind: PickKind,
    /// The target charged.
    pub target: TargetKey,
    /// For whom.
    pub request_id: RequestId,
    /// The model the request asked for (its prefill phases are measured per model).
    pub model: ModelName,
    /// How many input tokens.
    pub input_tokens: u64,
    /// How long before now the leg started: zero for a pick, the leg's age for one a proxy
    /// re-declares (so its prefill phase and prefilling age count from its real start).
    pub age: Duration,
    /// The ITL target (ms) of the class admission weighed it under (`None`: not weighed).
    pub itl_limit_ms: Option<u32>,
    /// A decode leg booked before its request's prefill: where that prefill is expected and
    /// what it will book there (`None`: not foreseen, or not a decode leg).
    pub awaiting_prefill: Option<AwaitingPrefill>,
}

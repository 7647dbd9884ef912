//! The worker view: which targets exist, for which model and role, which are drained, and which
//! are unpaired (their worker cannot pair with the model's serving prefill/decode group,
//! [`crate::pairing`]).
//!
//! Targets are interned to dense [`TargetKey`]s so the ledger and the scoring loop index
//! arrays instead of hashing names. A key, once given to a `(worker, rank)`, stays with it for
//! the life of the process (a worker that leaves and comes back gets its old key), so a
//! reservation booked before a worker left still points at the right place when it ends.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use infera_proto::types::{DpRank, ModelName, PickKind, Role, Target, WorkerId, WorkerRecord};

use crate::error::ControlError;
use crate::pairing::{self, Member, ModelPairing};
use crate::scoring::{Candidate, PoolId, PoolRef};
use crate::target::{Load, TargetKey};

/// What the view knows about one target.
#[derive(Clone, Debug)]
pub struct Slot {
    /// The target's name.
    pub target: Target,
    /// Its worker's record (shared by the worker's ranks); kept after the worker leaves.
    pub worker: Arc<WorkerRecord>,
    /// Registered right now.
    pub live: bool,
    /// Takes no new picks.
    pub drained: bool,
    /// Its worker's registrar asked for a drain before stopping it: no new picks either.
    pub draining: bool,
    /// Takes no picks because its worker is unpaired: why.
    pub unpaired: Option<Arc<str>>,
}

/// A model's pairing changed (a worker came, went or changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairingChange {
    /// The model.
    pub model: ModelName,
    /// Its pairing before.
    pub before: ModelPairing,
    /// Its pairing now.
    pub after: ModelPairing,
}

/// Candidate pool of one model and role.
#[derive(Clone, Debug)]
struct Pool {
    /// Given when the pool came into being; a pool emptied and filled again gets a new one.
    id: PoolId,
    /// Live targets, ordered by name.
    keys: Vec<TargetKey>,
}

/// The worker view: every target ever registered, the live ones per model and role, and the drain flags.
#[derive(Debug, Default)]
pub struct View {
    workers: BTreeMap<WorkerId, Arc<WorkerRecord>>,
    keys: HashMap<Target, TargetKey>,
    slots: Vec<Slot>,
    pools: HashMap<(ModelName, Role), Pool>,
    /// The id the next new pool gets.
    next_pool: u32,
    /// Drains persisted for targets not registered yet: applied when they first appear.
    pending_drains: HashSet<Target>,
    /// Workers whose registrars asked for a drain (`/infera/v1/drains/`), registered or not.
    draining: BTreeSet<WorkerId>,
    /// Each model's PD pairing (absent: nothing to pair).
    pairings: HashMap<ModelName, ModelPairing>,
    /// Pairing changes not yet taken ([`View::take_pairing_changes`]).
    pairing_changes: Vec<PairingChange>,
}

impl View {
    /// A view of `workers`.
    pub fn new(workers: impl IntoIterator<Item = WorkerRecord>) -> Self {
        let mut view = Self::default();
        for w in workers {
            view.upsert(w);
        }
        view
    }

    /// Adds or replaces a worker. Drain flags of its surviving ranks are kept.
    pub fn upsert(&mut self, record: WorkerRecord) {
        let record = Arc::new(record);
        // Every target of the new record has a key before any pool is rebuilt from the workers
        // (retiring the old record rebuilds its pool, which already counts the new record).
        let keys: Vec<TargetKey> = record.targets().map(|t| self.intern(&t, &record)).collect();
        if let Some(old) = self.workers.insert(record.id.clone(), record.clone()) {
            self.retire(&old);
            if old.model != record.model {
                self.pair(&old.model);
            }
        }
        let draining = self.draining.contains(&record.id);
        for key in keys {
            let slot = &mut self.slots[key.index()];
            slot.worker = record.clone();
            slot.live = true;
            slot.draining = draining;
        }
        self.rebuild_pool(&record.model, record.role);
        self.pair(&record.model);
    }

    /// Removes a worker; its targets stop taking picks. Returns whether it was known.
    pub fn remove(&mut self, id: &WorkerId) -> bool {
        let Some(old) = self.workers.remove(id) else {
            return false;
        };
        self.retire(&old);
        self.rebuild_pool(&old.model, old.role);
        self.pair(&old.model);
        true
    }

    /// The pairing changes since the last call, oldest first.
    pub fn take_pairing_changes(&mut self) -> Vec<PairingChange> {
        std::mem::take(&mut self.pairing_changes)
    }

    /// Pairs `model`'s live workers again, marking each target unpaired or not, and notes a
    /// change.
    fn pair(&mut self, model: &ModelName) {
        let members: Vec<Member> =
            self.workers.values().filter(|w| &w.model == model).map(|w| Member::of(w)).collect();
        let after = pairing::pair(&members);
        for w in self.workers.values().filter(|w| &w.model == model) {
            let reason: Option<Arc<str>> = after.unpaired.get(&w.id).map(|u| Arc::from(u.reason.as_str()));
            for t in w.targets() {
                self.slots[self.keys[&t].index()].unpaired.clone_from(&reason);
            }
        }
        let before = self.pairings.remove(model).unwrap_or_default();
        if before != after {
            self.pairing_changes.push(PairingChange { model: model.clone(), before, after: after.clone() });
        }
        if after != ModelPairing::default() {
            self.pairings.insert(model.clone(), after);
        }
    }

    /// The live workers, by id.
    pub fn workers(&self) -> impl Iterator<Item = &Arc<WorkerRecord>> {
        self.workers.values()
    }

    /// A target's key, if the target was ever registered.
    pub fn key(&self, target: &Target) -> Option<TargetKey> {
        self.keys.get(target).copied()
    }

    /// A target's slot.
    pub fn slot(&self, key: TargetKey) -> &Slot {
        &self.slots[key.index()]
    }

    /// The live targets of a worker (all ranks, or one).
    pub fn worker_targets(
        &self,
        id: &WorkerId,
        rank: Option<DpRank>,
    ) -> Result<Vec<TargetKey>, ControlError> {
        let record = self.workers.get(id).ok_or_else(|| ControlError::UnknownWorker(id.clone()))?;
        match rank {
            Some(r) if r.0 >= record.dp_size => Err(ControlError::UnknownTarget(Target::new(id.clone(), r))),
            Some(r) => Ok(vec![self.keys[&Target::new(id.clone(), r)]]),
            None => Ok(record.targets().map(|t| self.keys[&t]).collect()),
        }
    }

    /// Sets the drain flag of some targets.
    pub fn set_drained(&mut self, keys: &[TargetKey], drained: bool) {
        for k in keys {
            self.slots[k.index()].drained = drained;
        }
    }

    /// The workers whose registrars asked for a drain, now: their targets take no new picks.
    /// Returns the workers that changed (asked or no longer asked).
    pub fn set_draining(&mut self, workers: BTreeSet<WorkerId>) -> Vec<WorkerId> {
        let changed: Vec<WorkerId> = self.draining.symmetric_difference(&workers).cloned().collect();
        self.draining = workers;
        for slot in &mut self.slots {
            slot.draining = self.draining.contains(&slot.worker.id);
        }
        changed
    }

    /// The workers asked to drain that are registered now, each with its targets' keys.
    pub fn draining_workers(&self) -> Vec<(WorkerId, Vec<TargetKey>)> {
        self.draining
            .iter()
            .filter_map(|id| {
                Some((id.clone(), self.workers.get(id)?.targets().map(|t| self.keys[&t]).collect()))
            })
            .collect()
    }

    /// Drains targets by name, whether they are registered yet or not (persisted drains read at
    /// start, before the registry has delivered the workers).
    pub fn drain_by_name(&mut self, targets: impl IntoIterator<Item = Target>) {
        for t in targets {
            match self.keys.get(&t) {
                Some(k) => self.slots[k.index()].drained = true,
                None => {
                    self.pending_drains.insert(t);
                }
            }
        }
    }

    /// Every drained target, registered or waiting to be, by name.
    pub fn drained_names(&self) -> Vec<Target> {
        let mut out: Vec<Target> =
            self.slots.iter().filter(|s| s.drained).map(|s| s.target.clone()).collect();
        out.extend(self.pending_drains.iter().cloned());
        out.sort();
        out
    }

    /// All live targets, ordered by model, role and name.
    pub fn live_targets(&self) -> Vec<TargetKey> {
        let mut keys: Vec<TargetKey> = self.pools.values().flat_map(|p| p.keys.iter().copied()).collect();
        keys.sort_by(|a, b| {
            let (sa, sb) = (self.slot(*a), self.slot(*b));
            (&sa.worker.model, sa.worker.role.as_str(), &sa.target).cmp(&(
                &sb.worker.model,
                sb.worker.role.as_str(),
                &sb.target,
            ))
        });
        keys
    }

    /// Live targets per model and role (unpaired and drained ones included).
    pub fn target_counts(&self) -> HashMap<(ModelName, Role), usize> {
        self.pools.iter().map(|((model, role), pool)| ((model.clone(), *role), pool.keys.len())).collect()
    }

    /// The pools there are now (a pool that emptied is gone, and its id with it).
    pub fn pool_ids(&self) -> impl Iterator<Item = PoolId> + '_ {
        self.pools.values().map(|p| p.id)
    }

    /// Fills `out` with the eligible candidates a pick of `kind` for `model` chooses from, in
    /// pool order, and returns which pool that is. Decode picks use the model's
    /// decode workers, or its mixed workers in an aggregated deployment; prefill picks use its
    /// prefill workers. Unpaired targets are passed by; a model with prefills and decodes but no
    /// pair of them that can exchange KV refuses every pick.
    pub fn candidates(
        &self,
        model: &ModelName,
        kind: PickKind,
        load: impl Fn(TargetKey) -> Load,
        out: &mut Vec<Candidate>,
    ) -> Result<PoolRef, ControlError> {
        let role = match kind {
            PickKind::Prefill => Role::Prefill,
            PickKind::Decode if self.has_pool(model, Role::Decode) => Role::Decode,
            PickKind::Decode => Role::Mixed,
        };
        if role != Role::Mixed
            && let Some(why) = self.pairings.get(model).and_then(|p| p.no_pair.as_ref())
        {
            return Err(ControlError::NoCompatiblePair { model: model.clone(), why: why.clone() });
        }
        if !self.has_pool(model, role) {
            let known = [Role::Prefill, Role::Decode, Role::Mixed].iter().any(|r| self.has_pool(model, *r));
            return Err(if known {
                ControlError::NoPool { model: model.clone(), kind }
            } else {
                ControlError::UnknownModel(model.clone())
            });
        }
        let pool = self.pools.get(&(model.clone(), role)).expect("checked above");
        out.clear();
        let slots = &self.slots;
        out.extend(pool.keys.iter().enumerate().filter_map(|(position, &key)| {
            let s = &slots[key.index()];
            (s.live && !s.drained && !s.draining && s.unpaired.is_none())
                .then(|| Candidate::new(key, position, load(key), s.worker.page_size))
        }));
        if out.is_empty() {
            return Err(ControlError::NoEligibleTarget { model: model.clone(), kind });
        }
        Ok(PoolRef { id: pool.id, len: pool.keys.len() })
    }

    fn has_pool(&self, model: &ModelName, role: Role) -> bool {
        self.pools.get(&(model.clone(), role)).is_some_and(|p| !p.keys.is_empty())
    }

    fn intern(&mut self, target: &Target, record: &Arc<WorkerRecord>) -> TargetKey {
        if let Some(k) = self.keys.get(target) {
            return *k;
        }
        let key = TargetKey::from_index(u32::try_from(self.slots.len()).expect("fewer than 2^32 targets"));
        let drained = self.pending_drains.remove(target);
        self.slots.push(Slot {
            target: target.clone(),
            worker: record.clone(),
            live: false,
            drained,
            draining: self.draining.contains(&record.id),
            unpaired: None,
        });
        self.keys.insert(target.clone(), key);
        key
    }

    fn retire(&mut self, old: &WorkerRecord) {
        for t in old.targets() {
            if let Some(k) = self.keys.get(&t) {
                self.slots[k.index()].live = false;
            }
        }
        self.rebuild_pool(&old.model, old.role);
    }

    fn rebuild_pool(&mut self, model: &ModelName, role: Role) {
        let mut keys: Vec<TargetKey> = self
            .workers
            .values()
            .filter(|w| &w.model == model && w.role == role)
            .flat_map(|w| w.targets())
            .map(|t| self.keys[&t])
            .collect();
        keys.sort_by(|a, b| self.slots[a.index()].target.cmp(&self.slots[b.index()].target));
        if keys.is_empty() {
            self.pools.remove(&(model.clone(), role));
            return;
        }
        let next = &mut self.next_pool;
        let pool = self.pools.entry((model.clone(), role)).or_insert_with(|| {
            let id = PoolId::from_index(*next);
            *next += 1;
            Pool { id, keys: Vec::new() }
        });
        pool.keys = keys;
    }
}

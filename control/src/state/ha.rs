//! The replica set as the state shell sees it: the booking gate on every Router call, the legs
//! proxies re-declare, the takeover (a fresh ledger of the new term, the persisted settings and
//! drains read again) and the step-down, and whether a new leader's ledger is warm.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{DeclaredLeg, LeaseId};
use infera_registry::EtcdConfig;

use super::ControlState;
use crate::error::ControlError;
use crate::leader::election::Takeover;
use crate::leader::holders::{self, HolderBook};
use crate::leader::metrics::LeaderMetrics;
use crate::leader::warmth::Warmth;
use crate::leader::{Leadership, LeadershipView, Role};
use crate::persist::{self, Persisted};
use crate::routing::{Declared, Redeclared};

/// What the shell keeps of the replica set.
#[derive(Debug)]
pub struct Ha {
    leadership: Arc<Leadership>,
    warmth: Mutex<Warmth>,
    /// The proxies' book in etcd (`--etcd`).
    holders: Option<HolderBook>,
    /// etcd (`None`: standalone).
    etcd: Option<EtcdConfig>,
    /// The settings of the flags, under what etcd persisted (read again at each takeover).
    flags: Persisted,
    /// The proxies' default lease TTL: how long a new leader waits for unknown proxies.
    lease_ttl: Duration,
    metrics: LeaderMetrics,
    /// The worker registry has been read (always, with a static workers file), and its workers'
    /// engine facts (or the bounded wait for them is over).
    registry_read: std::sync::atomic::AtomicBool,
    /// A static control: until then, no lease while a worker's engine facts are being read.
    facts_wait: std::sync::OnceLock<Instant>,
}

impl Ha {
    /// The replica set of `leadership`; `etcd` `None` for a standalone control.
    pub fn new(
        leadership: Arc<Leadership>,
        etcd: Option<EtcdConfig>,
        flags: Persisted,
        metrics: LeaderMetrics,
    ) -> Self {
        let lease_ttl = flags.settings.lease_ttl;
        let holders = etcd.clone().map(HolderBook::start);
        let view = leadership.view();
        metrics.leadership(view.role != Role::Follower, view.epoch);
        let since = view.since.unwrap_or_else(Instant::now);
        Self {
            leadership,
            warmth: Mutex::new(Warmth::new(since, None, lease_ttl)),
            holders,
            etcd,
            flags,
            lease_ttl,
            metrics,
            registry_read: std::sync::atomic::AtomicBool::new(true),
            facts_wait: std::sync::OnceLock::new(),
        }
    }

    fn warmth(&self) -> std::sync::MutexGuard<'_, Warmth> {
        self.warmth.lock().expect("warmth lock")
    }
}

impl ControlState {
    /// The worker registry this control follows (`None`: standalone).
    pub fn etcd(&self) -> Option<&EtcdConfig> {
        self.ha.etcd.as_ref()
    }

    /// Some targets were ejected or re-admitted: the metrics, and the leader's ejections to
    /// etcd for the next leader to carry on (a follower's engine checks eject in its own
    /// breakers only).
    pub(super) fn ejections_changed(
        &self,
        changes: &[(infera_proto::types::Target, crate::ejection::Transition)],
    ) {
        if changes.is_empty() {
            return;
        }
        for (target, t) in changes {
            self.ejection_metrics.transition(target, *t);
        }
        if self.ha.leadership.check(Instant::now()).is_ok() {
            self.save_ejections();
        }
    }

    /// Hands the ejections in force to the etcd writer.
    pub(super) fn save_ejections(&self) {
        if let Some(saver) = &self.ejections {
            let core = self.core();
            saver.save(core.ejections(Instant::now(), std::time::SystemTime::now()));
        }
    }

    /// Refuses a Router call `rpc` when this control may not book.
    pub(super) fn gate(&self, rpc: &'static str) -> Result<(), ControlError> {
        self.ha.leadership.check(Instant::now()).inspect_err(|_| self.ha.metrics.not_leader(rpc))
    }

    /// Refuses `OpenLease` as [`Self::gate`] does, and before the registry and its workers'
    /// engine facts are read: a proxy (or one whose picks wait on across a restart) would
    /// otherwise pick on a view without them and meet "no eligible target". It retries, and
    /// its legs wait for the lease.
    pub(super) fn gate_lease(&self) -> Result<(), ControlError> {
        self.check_registry_read().inspect_err(|_| self.ha.metrics.not_leader("OpenLease"))?;
        self.gate("OpenLease")
    }

    /// The registry (etcd) or its workers' engine facts have not been read yet: the target list
    /// is not to be handed out, nor a lease opened.
    pub fn registry_pending(&self) {
        self.ha.registry_read.store(false, std::sync::atomic::Ordering::Release);
    }

    /// The registry's first snapshot is in the view, and its workers' engine facts have been
    /// read (or the bounded wait for them is over).
    pub fn registry_read(&self) {
        self.ha.registry_read.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The target list as proxies take it (their fallback list): refused until the registry
    /// and its workers' engine facts have been read, so that a restarted control never hands
    /// out a list it has not learned yet — empty, or without a worker still being asked (a
    /// proxy keeps its last list on an error).
    pub fn check_registry_read(&self) -> Result<(), ControlError> {
        if self.facts_read() {
            Ok(())
        } else {
            Err(ControlError::NotLeader { leader: self.ha.leadership.view().leader_url, lapsed: false })
        }
    }

    /// `GET /readiness`: ready (with the role) once the registry and its workers' engine facts
    /// have been read.
    pub fn readiness(&self) -> Result<&'static str, &'static str> {
        if self.facts_read() {
            Ok(self.ha.leadership.view().role.as_str())
        } else {
            Err("the worker registry or its workers' engine facts have not been read yet")
        }
    }

    /// A static control (no registry to read): its workers' engine facts are waited for until
    /// `until`, or until none is being asked for any more.
    pub fn wait_for_facts(&self, until: Instant) {
        let _ = self.ha.facts_wait.set(until);
    }

    /// Whether the registry and its workers' engine facts have been read (or the bounded wait
    /// for the facts is over).
    fn facts_read(&self) -> bool {
        self.ha.registry_read.load(std::sync::atomic::Ordering::Acquire)
            && !self
                .ha
                .facts_wait
                .get()
                .is_some_and(|until| Instant::now() < *until && self.workers_awaiting_facts() > 0)
    }

    /// The leadership (for `GetConfig`, and where Admin calls go).
    pub fn leadership(&self) -> &Leadership {
        &self.ha.leadership
    }

    /// The role, leader and term, and whether the ledger is warm.
    pub fn leadership_view(&self) -> (LeadershipView, bool) {
        let view = self.ha.leadership.view();
        let warm = view.role != Role::Follower && self.ha.warmth().is_warm(Instant::now());
        (view, warm)
    }

    /// Sets the leadership gauges (every second), and strikes the proxies that never came back
    /// after a takeover from the book.
    pub fn export_leader_metrics(&self) {
        let (view, warm) = self.leadership_view();
        self.ha.metrics.leadership(view.role != Role::Follower, view.epoch);
        self.ha.metrics.warm(warm);
        if view.role == Role::Leader {
            let gone = self.ha.warmth().take_gone(Instant::now());
            for holder in gone {
                tracing::info!(%holder, "a proxy of the previous leader did not come back; forgotten");
                self.lease_gone(&holder);
            }
        }
    }

    /// A proxy opened a lease: the book of proxies a later leader waits for.
    pub(super) fn lease_opened(&self, holder: &str, ttl: Duration) {
        if let Some(book) = &self.ha.holders {
            book.opened(holder, ttl);
        }
    }

    /// A proxy's lease ended: out of the book, unless it holds another.
    pub(super) fn lease_gone(&self, holder: &str) {
        if let Some(book) = &self.ha.holders
            && !self.core().holds_lease_of(holder)
        {
            book.gone(holder);
        }
    }

    /// Books the legs a proxy re-declares under `caller`'s `lease`.
    pub fn redeclare(
        &self,
        lease: LeaseId,
        legs: &[DeclaredLeg],
        caller: &crate::identity::Identity,
    ) -> Result<Vec<Declared>, ControlError> {
        self.gate("Redeclare")?;
        let (Redeclared { results, changes }, holder) = {
            let mut core = self.core();
            let out = core.redeclare(lease, caller, legs, Instant::now(), SystemTime::now());
            let out = out.inspect_err(|e| self.refused_foreign("Redeclare", e))?;
            (out, core.lease_holder(lease))
        };
        self.ha.metrics.redeclare_call();
        for r in &results {
            match r {
                Declared::Booked { kind, was_booked, .. } => self.ha.metrics.redeclared(*kind, *was_booked),
                Declared::UnknownTarget => self.ha.metrics.unknown_target(),
                Declared::OverCapacity => self.metrics.bound_refusal("redeclare_over_capacity"),
            }
        }
        for change in &changes {
            self.metrics.load(change);
        }
        if let Some(holder) = holder {
            self.ha.warmth().redeclared(&holder);
        }
        Ok(results)
    }

    /// Takes over with term `epoch`: the persisted settings, drains and ejections read again
    /// (another leader may have changed them), a fresh ledger, and a warmth that waits for the
    /// proxies of the book.
    async fn take_over(&self, epoch: u32) {
        let (loaded, expected) = match &self.ha.etcd {
            Some(etcd) => (persist::load(etcd, self.ha.flags.clone()).await, holders::load(etcd).await),
            None => (persist::Loaded::flags(self.ha.flags.clone()), None),
        };
        let now = Instant::now();
        let carried = loaded.ejections.len();
        {
            let mut core = self.core();
            core.restore(loaded.persisted, loaded.drains);
            core.carry_ejections(loaded.ejections, now, SystemTime::now());
            core.reset_ledger(epoch);
        }
        self.metrics.clear_identity_leases();
        if carried > 0 {
            tracing::info!(carried, "ejections carried over from the last leader");
        }
        self.save_ejections();
        tracing::info!(epoch, waiting_for = expected.as_ref().map(|e| e.len()), "taking over as leader");
        *self.ha.warmth() = Warmth::new(now, expected, self.ha.lease_ttl);
        self.ha.metrics.takeover();
        self.publish_loads();
    }
}

impl Takeover for ControlState {
    fn elected(&self, epoch: u32) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.take_over(epoch))
    }

    fn deposed(&self) {
        // What it held is the new leader's; ids of this term are refused from now on.
        self.core().reset_ledger(0);
        self.metrics.clear_identity_leases();
        self.publish_loads();
        self.ha.metrics.leadership(false, 0);
        self.ha.metrics.warm(false);
    }
}

/// Lets the election hold the state as its [`Takeover`].
pub fn takeover(state: &Arc<ControlState>) -> Arc<dyn Takeover> {
    state.clone()
}

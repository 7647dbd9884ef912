//! The effectful shell around the pure core: one lock, the clock, metrics and decision fan-out.
//! Both gRPC services and the lease reaper go through [`ControlState`].

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{
    DecodeInputDemand, DpRank, LeaseId, PickKind, PickRequest, Release, ReleaseReason, RequestWeight, Role,
    WorkerId, WorkerRecord,
};
use rand::rngs::SmallRng;

use crate::decisions::DecisionHub;
use crate::engine::metrics::EngineMetrics;
use crate::engine::{EngineBoard, EngineFeed};
use crate::engine_facts::discovery::Discovery;
use crate::error::ControlError;
use crate::fit::WeightMode;
use crate::fit::metrics::FitMetrics;
use crate::identity::Identity;
use crate::kv_feed::KvFeed;
use crate::metrics::{ControlMetrics, PrefillPickTokens};
use crate::routing::{
    Ended, LeaseExpired, OpenedLease, OverlapSource, Overlaps, PickContext, Picked, ReleaseEffect,
    ReleasedNow, ReservationRow, RoutingCore, TargetRow,
};
use crate::settings::{OverlapCredit, Settings};
use crate::target::TargetKey;

mod admission;
mod gauges;
mod ha;
mod step_prediction;
mod workers;

pub use admission::AdmissionDesk;
pub use ha::{Ha, takeover};

/// Shared state of a running control.
#[derive(Debug)]
pub struct ControlState {
    /// Registered workers asked for their engine facts before they enter the view. Taken
    /// before the core lock whenever both are held, so a registry change and a discovered worker
    /// are applied one at a time.
    discovery: Mutex<Discovery>,
    core: Mutex<RoutingCore<SmallRng>>,
    /// The KV-event subscribers and the prefix index they fill (read by prefill picks before they
    /// take the core lock; never held while the core lock is taken).
    kv_feed: Arc<KvFeed>,
    /// The engines' own readings (`GET /v1/loads`), outside the core lock.
    engine: EngineFeed,
    engine_metrics: EngineMetrics,
    fit_metrics: FitMetrics,
    metrics: ControlMetrics,
    decisions: DecisionHub,
    /// Writers of admin changes to etcd (`--etcd`).
    settings_saver: Option<crate::persist::SettingsSaver>,
    drains: Option<crate::persist::DrainSaver>,
    ejections: Option<crate::persist::EjectionSaver>,
    /// The replica set: who books, takeovers, warmth.
    ha: Ha,
    ejection_metrics: crate::ejection::metrics::EjectionMetrics,
    /// Fleet admission: the class book, the queues.
    admission: AdmissionDesk,
}

impl ControlState {
    /// Wraps a core; `kv_feed` is shared with its consumer task ([`crate::kv_feed::consume`]).
    pub fn new(
        core: RoutingCore<SmallRng>,
        kv_feed: Arc<KvFeed>,
        engine: (EngineFeed, EngineMetrics, FitMetrics),
        metrics: ControlMetrics,
        persist_to: Option<infera_registry::EtcdConfig>,
        ha: Ha,
        ejection_metrics: crate::ejection::metrics::EjectionMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            discovery: Mutex::new(Discovery::new(metrics.discovery(), engine.0.connector().clone())),
            core: Mutex::new(core),
            kv_feed,
            engine: engine.0,
            engine_metrics: engine.1,
            fit_metrics: engine.2,
            metrics,
            decisions: DecisionHub::new(4096),
            settings_saver: persist_to.clone().map(crate::persist::SettingsSaver::start),
            drains: persist_to.clone().map(crate::persist::DrainSaver::start),
            ejections: persist_to.map(crate::persist::EjectionSaver::start),
            ha,
            ejection_metrics,
            admission: AdmissionDesk::default(),
        })
    }

    /// Follows a worker's KV events over its ranks ([`workers`] calls it as the worker enters the
    /// view). The worker must be in the view already.
    fn follow_kv(&self, record: &WorkerRecord) {
        let keys: Option<Vec<TargetKey>> = {
            let core = self.core();
            record.targets().map(|t| core.target_key(&t)).collect()
        };
        let Some(keys) = keys else {
            tracing::warn!(worker = %record.id, "not following KV events of a worker the view does not hold");
            return;
        };
        self.kv_feed.follow(record, keys);
    }

    /// Moves the feed's and the index's counters into the metrics.
    pub fn export_kv_metrics(&self) {
        self.kv_feed.export_metrics();
    }

    /// The engines' readings.
    pub fn engine(&self) -> &EngineBoard {
        self.engine.board()
    }

    /// Stops polling the engines (control is stopping).
    pub fn stop_engine(&self) {
        self.engine.stop();
    }

    /// Hands the core each pool's fitted W (auto picks use them from the next pick) and sets
    /// the fit's gauges.
    pub fn sync_weights(&self) {
        let pools = self.engine.fits().pools();
        let fitted = pools
            .iter()
            .filter_map(|p| Some((p.model.clone(), RequestWeight::new(p.weight?).ok()?)))
            .collect();
        // Only a fit that tracks the step predicts for admission (`fit::predict::predictor`).
        let steps = pools
            .iter()
            .flat_map(|p| &p.workers)
            .filter_map(|w| Some((w.worker.clone(), crate::fit::predict::predictor(&w.report)?)));
        let steps = crate::admission::StepFits::new(steps);
        let mut core = self.core();
        core.weights_mut().set_fitted(fitted);
        core.set_step_fits(steps);
        let set = core.settings().weight;
        let weights = core.weights().clone();
        drop(core);
        self.fit_metrics.export(&pools, |p| weights.for_pool(&p.model, set).get());
        self.compare_step_predictions(&pools);
    }

    /// How W is chosen, and every decode pool's fit.
    pub fn weight_fits(&self) -> (WeightMode, Vec<crate::fit::PoolFit>) {
        let mode = self.core().weights().mode();
        (mode, self.engine.fits().pools())
    }

    fn core(&self) -> MutexGuard<'_, RoutingCore<SmallRng>> {
        // The core panics only on a broken ledger invariant; serving on would be worse.
        self.core.lock().expect("routing state poisoned by an earlier panic")
    }

    /// Picks and books under `caller`'s lease, a decode pick within `limit` when fleet admission
    /// weighs it (`admission`).
    fn pick_limited(
        &self,
        kind: PickKind,
        req: &PickRequest,
        caller: &Identity,
        limit: Option<crate::admission::AdmitLimit>,
    ) -> Result<Picked, ControlError> {
        let rpc = if kind == PickKind::Decode { "PickDecode" } else { "PickPrefill" };
        self.gate(rpc)?;
        let started = Instant::now();
        let watched =
            self.decisions.watched() || tracing::enabled!(target: "decode_demand", tracing::Level::DEBUG);
        // The KV overlaps first, under the index's read lock alone: the routing lock is held only
        // to list the pool's keys and then to book (`routing::overlaps`).
        let overlaps = Overlaps::needed_for(kind, req, limit).map(|pool| {
            let mut keys = Vec::new();
            self.core().pool_keys(&req.model, pool, &mut keys);
            Overlaps::compute(&self.kv_feed.index(), &req.page_hashes, keys)
        });
        let (result, mode) = {
            let mut core = self.core();
            let mode = core.settings().mode;
            let ctx = PickContext {
                caller,
                kv: overlaps.as_ref().map(|o| o as &dyn OverlapSource),
                record_decision: watched,
                now: Instant::now(),
                wall: SystemTime::now(),
                kv_room: Some(self.engine.board()),
            };
            let mut result = core.pick_within(kind, req, ctx, limit);
            // Fencing: a leader paused between the gate and the booking may have lost its term
            // meanwhile; what it booked then is undone, never answered.
            if let Ok(picked) = &result
                && let Err(e) = self.gate(rpc)
            {
                let undone = Release::new(picked.reservation, ReleaseReason::Cancelled);
                let _ = core.release(undone, caller, Instant::now());
                result = Err(e);
            }
            (result, mode)
        };
        let mode = if kind == PickKind::Decode { mode.as_str() } else { "-" };
        let seconds = started.elapsed().as_secs_f64();
        match result {
            Ok(mut picked) => {
                self.metrics.pick(kind, mode, "ok", seconds);
                if picked.bypassed_ejections {
                    self.ejection_metrics.bypassed();
                }
                if picked.chosen.probe {
                    self.ejection_metrics.probe();
                }
                self.metrics.load(&picked.change);
                if kind == PickKind::Prefill {
                    let tokens = PrefillPickTokens {
                        hashed: !req.page_hashes.is_empty(),
                        prompt: req.input_tokens,
                        cached: picked.chosen.cached_tokens,
                        best_cached: picked.best_cached_tokens,
                    };
                    self.metrics.prefix_hits.pick(&req.model, tokens);
                }
                if let Some(agree) = picked.agree {
                    self.metrics.shadow(agree);
                }
                if let Some(d) = picked.decision.take() {
                    tracing::debug!(
                        target: "decode_demand",
                        kind = kind.as_str(),
                        request_id = %d.request_id,
                        chosen = %d.chosen,
                        suggested = ?d.suggested.as_ref().map(ToString::to_string),
                        weight = d.weight.get(),
                        candidates = ?d.candidates.iter().map(|c| (c.target.to_string(), c.load.booked_input_tokens, c.load.held_requests, c.cost)).collect::<Vec<_>>(),
                        "decision"
                    );
                    self.decisions.publish(d);
                }
                Ok(picked)
            }
            // A pick admission turned away is counted by admission's own metrics (the
            // dispatcher tries a queue's head on every tick).
            Err(e @ ControlError::AdmissionQueued { .. }) => Err(e),
            Err(e) => {
                self.metrics.pick(kind, mode, e.reason().as_str(), seconds);
                self.refused_foreign(rpc, &e);
                Err(e)
            }
        }
    }

    /// Counts a pick that failed before reaching the core (bad input).
    pub fn pick_rejected(&self, kind: PickKind, e: &ControlError) {
        let mode = if kind == PickKind::Decode { self.core().settings().mode.as_str() } else { "-" };
        self.metrics.pick(kind, mode, e.reason().as_str(), 0.0);
    }

    /// Ends `caller`'s reservation (a failed leg: with how it failed), or finds it ended
    /// already by an earlier release.
    pub fn release(&self, release: Release, caller: &Identity) -> Result<ReleaseEffect, ControlError> {
        self.gate("Release")?;
        let released = self.core().release(release, caller, Instant::now()).inspect_err(|e| {
            self.refused_foreign("Release", e);
        })?;
        if let Some(f) = release.failure {
            self.ejection_metrics.leg_failure(f);
        }
        self.admission_changed();
        match released {
            Some(ReleasedNow { kind, change, phase_median, health, discounted }) => {
                self.metrics.release(kind, release.reason);
                self.metrics.load(&change);
                self.ejection_metrics.discounted(discounted);
                self.ejections_changed(&health);
                if let Some((model, median)) = phase_median {
                    self.metrics.prefill_phase_median(&model, median);
                }
                Ok(ReleaseEffect::Ended)
            }
            None => {
                self.metrics.repeated_release();
                Ok(ReleaseEffect::AlreadyEnded)
            }
        }
    }

    /// Opens a lease of `caller`.
    pub fn open_lease(
        &self,
        holder: String,
        ttl: Duration,
        caller: &Identity,
    ) -> Result<OpenedLease, ControlError> {
        self.gate_lease()?;
        let (opened, leases, theirs) = {
            let mut core = self.core();
            let opened = core.open_lease(holder.clone(), caller, ttl, Instant::now());
            (opened, core.lease_count(), core.leases_of(caller))
        };
        let opened = opened.inspect_err(|e| {
            self.metrics.bound_refusal("leases");
            tracing::warn!(identity = ?caller.as_str(), error = %e, "a lease refused");
        })?;
        self.metrics.leases(leases);
        self.metrics.identity_leases(caller, theirs);
        self.lease_opened(&holder, opened.ttl);
        Ok(opened)
    }

    /// Renews `caller`'s lease.
    pub fn keep_alive(&self, lease: LeaseId, caller: &Identity) -> Result<Duration, ControlError> {
        self.gate("KeepAlive")?;
        self.core()
            .keep_alive(lease, caller, Instant::now())
            .inspect_err(|e| self.refused_foreign("KeepAlive", e))
    }

    /// Closes `caller`'s lease, releasing what it held as cancelled.
    pub fn close_lease(&self, lease: LeaseId, caller: &Identity) -> Result<usize, ControlError> {
        self.gate("CloseLease")?;
        let (ended, leases, holder, theirs) = {
            let mut core = self.core();
            let holder = core.lease_holder(lease);
            let ended = core.close_lease(lease, caller, Instant::now());
            let ended = ended.inspect_err(|e| self.refused_foreign("CloseLease", e))?;
            (ended, core.lease_count(), holder, core.leases_of(caller))
        };
        self.metrics.leases(leases);
        self.metrics.identity_leases(caller, theirs);
        if let Some(holder) = holder {
            self.lease_gone(&holder);
        }
        self.ended(&ended, ReleaseReason::Cancelled);
        Ok(ended.len())
    }

    /// Forgets idle sessions.
    pub fn sweep_sessions(&self) {
        self.core().sweep_sessions(Instant::now());
    }

    /// Expires overdue leases; returns how many expired.
    pub fn tick(&self) -> usize {
        let (expired, leases, owners) = {
            let mut core = self.core();
            let expired = core.tick(Instant::now());
            let owners: Vec<(Identity, usize)> =
                expired.iter().map(|e| (e.owner.clone(), core.leases_of(&e.owner))).collect();
            (expired, core.lease_count(), owners)
        };
        self.metrics.leases(leases);
        for (owner, n) in &owners {
            self.metrics.identity_leases(owner, *n);
        }
        for LeaseExpired { lease, holder, ended, .. } in &expired {
            tracing::warn!(%lease, %holder, released = ended.len(), "lease expired; its reservations are released");
            self.metrics.lease_expired();
            self.ended(ended, ReleaseReason::LeaseExpired);
            self.lease_gone(holder);
        }
        expired.len()
    }

    fn ended(&self, ended: &[Ended], reason: ReleaseReason) {
        if !ended.is_empty() {
            self.admission_changed();
        }
        for Ended { reservation, change } in ended {
            self.metrics.release(reservation.kind, reason);
            self.metrics.load(change);
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        self.core().settings().clone()
    }

    /// Sets W: pinned to `w`, or fitted (auto) with `w` as the fallback.
    pub fn set_weight(&self, w: RequestWeight, mode: WeightMode) -> Result<Settings, ControlError> {
        let s = self.change_settings(|core| {
            core.set_weight(w)?;
            core.weights_mut().set_mode(mode);
            Ok(core.settings())
        })?;
        tracing::info!(weight = w.get(), mode = mode.as_str(), "decode request weight changed");
        Ok(s)
    }

    /// Sets the demand mode.
    pub fn set_mode(&self, mode: DecodeInputDemand) -> Result<Settings, ControlError> {
        let s = self.change_settings(|core| core.set_mode(mode))?;
        tracing::info!(mode = mode.as_str(), "decode input demand changed");
        Ok(s)
    }

    /// Sets the prefill overlap credit.
    pub fn set_overlap_credit(&self, credit: OverlapCredit) -> Result<Settings, ControlError> {
        let s = self.change_settings(|core| core.set_overlap_credit(credit))?;
        tracing::info!(credit = credit.get(), "prefill overlap credit changed");
        Ok(s)
    }

    /// Applies one settings change and hands the result to the etcd writer while the routing
    /// lock is still held, so the last value handed over is the last change made.
    fn change_settings(
        &self,
        change: impl FnOnce(&mut RoutingCore<SmallRng>) -> Result<&Settings, ControlError>,
    ) -> Result<Settings, ControlError> {
        let mut core = self.core();
        let s = change(&mut core)?.clone();
        if let Some(saver) = &self.settings_saver {
            saver.save(crate::persist::Persisted { settings: s.clone(), weight_mode: core.weights().mode() });
        }
        Ok(s)
    }

    /// Drains or resumes; returns the targets touched with their loads.
    pub fn set_drained(
        &self,
        worker: &WorkerId,
        rank: Option<DpRank>,
        drained: bool,
    ) -> Result<Vec<TargetRow>, ControlError> {
        let mut core = self.core();
        let keys = core.set_drained(worker, rank, drained)?;
        tracing::info!(%worker, rank = ?rank.map(|r| r.0), drained, "drain flag changed");
        if let Some(saver) = &self.drains {
            saver.save(core.view().drained_names());
        }
        Ok(core.target_rows(&keys, Instant::now()))
    }

    /// The workers whose registrars asked for a drain: they take no new picks from now on.
    pub fn set_draining(&self, workers: std::collections::BTreeSet<WorkerId>) {
        let changed = self.core().set_draining(workers.clone());
        for worker in changed {
            let asked = workers.contains(&worker);
            tracing::info!(%worker, asked, "drain {} by the worker's registrar",
                if asked { "asked: no new picks" } else { "ended" });
        }
    }

    /// What each worker being drained still holds, when this control books (standalone, or
    /// the leader) and its ledger is warm; `None` otherwise: a follower's ledger, or a new
    /// leader's before the proxies have re-declared, is not the truth.
    pub fn drain_holdings(&self) -> Option<Vec<crate::routing::DrainHolding>> {
        self.leadership().check(Instant::now()).ok()?;
        let (_, warm) = self.leadership_view();
        warm.then(|| self.core().drain_holdings())
    }

    /// Live targets with loads.
    pub fn targets(&self, model: Option<&str>, role: Option<Role>) -> Vec<TargetRow> {
        self.core().targets(model, role, Instant::now())
    }

    /// Live reservations.
    pub fn reservations(&self, lease: Option<LeaseId>, worker: Option<&str>) -> Vec<ReservationRow> {
        self.core().reservations(lease, worker)
    }

    /// The decision fan-out.
    pub fn decisions(&self) -> &DecisionHub {
        &self.decisions
    }

    /// Counts (and logs) a call of `rpc` that named another identity's lease or reservation.
    pub(crate) fn refused_foreign(&self, rpc: &'static str, e: &ControlError) {
        if e.is_foreign() {
            self.metrics.foreign_id(rpc);
            tracing::warn!(rpc, error = %e, "a call named another identity's lease or reservation; refused as unknown");
        }
    }

    /// Counts a call refused by a bound per identity (`leases`, `redeclare_bytes`).
    pub fn bound_refusal(&self, bound: &'static str) {
        self.metrics.bound_refusal(bound);
    }
}

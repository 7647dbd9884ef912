//! Workers entering and leaving the view: registry changes and static workers, each asked for
//! its engine facts first ([`crate::engine_facts`]), and the PD pairing changes they make
//! ([`crate::pairing`]).

use std::sync::{Arc, MutexGuard, Weak};

use infera_proto::types::{RegisteredWorker, Role, WorkerId, WorkerRecord};

use super::ControlState;
use crate::engine_facts::discovery::Discovery;
use crate::view::PairingChange;

impl ControlState {
    /// Applies a registry change to the worker view. A removed worker's targets take no new
    /// picks; what they hold is released as its streams end. A new or changed record takes the
    /// worker out of the view until its `/server_info` has been read again.
    pub fn apply(self: &Arc<Self>, change: infera_registry::Change) {
        let mut discovery = self.discovery();
        match change {
            infera_registry::Change::Upsert(registered) => {
                self.metrics.registry_change("upsert");
                discovery.cancel(&registered.id);
                if self.remove_from_view(&registered.id) {
                    self.forget(&registered.id);
                }
                self.start_discovery(&mut discovery, *registered);
            }
            infera_registry::Change::Refused { .. } => self.metrics.registry_change("refused"),
            infera_registry::Change::Remove(id) => {
                self.metrics.registry_change("remove");
                tracing::info!(worker = %id, "worker left");
                discovery.cancel(&id);
                self.remove_from_view(&id);
                self.forget(&id);
            }
        }
    }

    /// Registers a worker of the static file: into the view once its `/server_info` has answered.
    pub fn register(self: &Arc<Self>, registered: RegisteredWorker) {
        let mut discovery = self.discovery();
        self.start_discovery(&mut discovery, registered);
    }

    fn start_discovery(self: &Arc<Self>, discovery: &mut Discovery, registered: RegisteredWorker) {
        tracing::info!(worker = %registered.id, url = %registered.url,
            "worker registered; reading its engine facts (/server_info) before routing to it");
        let state: Weak<Self> = Arc::downgrade(self);
        discovery.start(
            registered,
            Box::new(move |generation, record| {
                if let Some(state) = state.upgrade() {
                    state.discovered(generation, record);
                }
            }),
        );
    }

    /// A discovery's answer: the worker enters the view unless a newer record or its removal
    /// came first.
    fn discovered(&self, generation: u64, record: WorkerRecord) {
        let mut discovery = self.discovery();
        if discovery.finish(&record.id, generation) {
            self.upsert(record);
        }
    }

    /// A worker whose engine facts are known enters (or changes in) the view, and its KV events
    /// and engine readings are followed over its ranks. Called with the discovery lock held.
    fn upsert(&self, record: WorkerRecord) {
        tracing::info!(worker = %record.id, role = record.role.as_str(), model = %record.model,
            url = %record.url, ranks = record.dp_size, page_size = record.page_size, "worker registered");
        let (changes, counts) = {
            let mut core = self.core();
            core.upsert_worker(record.clone());
            (core.take_pairing_changes(), core.view().target_counts())
        };
        self.metrics.view().targets(&counts);
        self.paired(&changes);
        // The view knows the worker's targets now, so the feed's events find their keys.
        self.follow_kv(&record);
        self.engine.follow(&record);
        self.publish_loads();
    }

    /// Takes a worker out of the view; whether it was in it.
    fn remove_from_view(&self, id: &WorkerId) -> bool {
        let (known, changes, counts) = {
            let mut core = self.core();
            let known = core.remove_worker(id);
            (known, core.take_pairing_changes(), core.view().target_counts())
        };
        self.metrics.view().targets(&counts);
        self.paired(&changes);
        known
    }

    /// Logs each pairing change once and sets the unpaired gauges.
    fn paired(&self, changes: &[PairingChange]) {
        for PairingChange { model, before, after } in changes {
            for (id, unpaired) in &after.unpaired {
                if before.unpaired.get(id) != Some(unpaired) {
                    tracing::warn!(%model, worker = %id, role = unpaired.role.as_str(), reason = %unpaired.reason,
                        "worker unpaired: it cannot exchange KV with the model's serving prefill/decode group and takes no picks");
                }
            }
            for id in before.unpaired.keys().filter(|id| !after.unpaired.contains_key(*id)) {
                tracing::info!(%model, worker = %id, "worker no longer unpaired");
            }
            match (&before.no_pair, &after.no_pair) {
                (_, Some(why)) if before.no_pair.as_ref() != Some(why) => {
                    tracing::error!(%model, %why, "no compatible prefill/decode pair: every pick for the model is refused (NO_COMPATIBLE_PAIR)");
                }
                (Some(_), None) => {
                    tracing::info!(%model, serving = ?after.serving.as_ref().map(ToString::to_string),
                    "the model has a compatible prefill/decode pair again")
                }
                _ => {}
            }
            if before.serving != after.serving
                && let (Some(from), Some(to)) = (&before.serving, &after.serving)
            {
                tracing::warn!(%model, %from, %to, "the model's serving prefill/decode group changed");
            }
            for role in [Role::Prefill, Role::Decode] {
                self.metrics.view().unpaired(model, role, after.unpaired_of(role));
            }
        }
    }

    /// Stops following a worker that left the view.
    fn forget(&self, id: &WorkerId) {
        self.kv_feed.forget(id);
        self.engine.forget(id);
        self.publish_loads();
    }

    /// Registered workers whose engine facts (`/server_info`) are not read yet: not routable.
    pub fn workers_awaiting_facts(&self) -> usize {
        self.discovery().awaiting()
    }

    fn discovery(&self) -> MutexGuard<'_, Discovery> {
        self.discovery.lock().expect("engine-facts discovery poisoned by an earlier panic")
    }
}

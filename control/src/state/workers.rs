//! Workers entering and leaving the view: registry changes, static workers, and the ones whose
//! `dp_size` is discovered first ([`crate::dp_discovery`]).

use std::sync::{Arc, MutexGuard, Weak};

use infera_proto::types::{RegisteredWorker, Sizing, WorkerId, WorkerRecord};

use super::ControlState;
use crate::dp_discovery::Discovery;

impl ControlState {
    /// Applies a registry change to the worker view. A removed worker's targets take no new
    /// picks; what they hold is released as its streams end. A record without `dp_size` takes
    /// the worker out of the view until its `/server_info` gives the size.
    pub fn apply(self: &Arc<Self>, change: infera_registry::Change) {
        let mut discovery = self.discovery();
        match change {
            infera_registry::Change::Upsert(registered) => {
                self.metrics.registry_change("upsert");
                discovery.cancel(&registered.id);
                match (*registered).sizing() {
                    Sizing::Given(record) => self.upsert(record),
                    Sizing::Ask(registered) => {
                        if self.core().remove_worker(&registered.id) {
                            self.forget(&registered.id);
                        }
                        self.start_discovery(&mut discovery, registered);
                    }
                }
            }
            infera_registry::Change::Remove(id) => {
                self.metrics.registry_change("remove");
                tracing::info!(worker = %id, "worker left");
                discovery.cancel(&id);
                self.core().remove_worker(&id);
                self.forget(&id);
            }
        }
    }

    /// Registers a worker of the static file: into the view at once when its record gives
    /// `dp_size`, once its `/server_info` has given it otherwise.
    pub fn register(self: &Arc<Self>, registered: RegisteredWorker) {
        let mut discovery = self.discovery();
        match registered.sizing() {
            Sizing::Given(record) => self.upsert(record),
            Sizing::Ask(registered) => self.start_discovery(&mut discovery, registered),
        }
    }

    fn start_discovery(self: &Arc<Self>, discovery: &mut Discovery, registered: RegisteredWorker) {
        tracing::info!(worker = %registered.id, url = %registered.url,
            "worker registered without dp_size; asking its /server_info before routing to it");
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

    /// A worker whose ranks are known enters (or changes in) the view, and its KV events and
    /// engine readings are followed over those ranks. Called with the discovery lock held.
    fn upsert(&self, record: WorkerRecord) {
        tracing::info!(worker = %record.id, role = record.role.as_str(), model = %record.model,
            url = %record.url, ranks = record.dp_size, "worker registered");
        self.core().upsert_worker(record.clone());
        // The view knows the worker's targets now, so the feed's events find their keys.
        self.follow_kv(&record);
        self.engine.follow(&record);
        self.publish_loads();
    }

    /// Stops following a worker that left the view.
    fn forget(&self, id: &WorkerId) {
        self.kv_feed.forget(id);
        self.engine.forget(id);
        self.publish_loads();
    }

    fn discovery(&self) -> MutexGuard<'_, Discovery> {
        self.discovery.lock().expect("dp discovery poisoned by an earlier panic")
    }
}

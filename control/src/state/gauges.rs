//! The gauges set from the ledger and the engines on a timer, and the engines' health: a worker
//! whose `/v1/loads` stopped answering counts against its targets' breakers (outlier ejection),
//! and so does a rank that answers with a clock standing still while it holds requests (a hung
//! scheduler: [`crate::engine::EngineClock`]).

use std::time::{Duration, Instant};

use super::ControlState;
use crate::routing::{LoadChange, TargetRow};

/// How long a worker's engine readings may go stale before each check counts a failure against
/// its targets: this many poll intervals, and at least [`MIN_STALE`].
const STALE_POLLS: u32 = 10;
const MIN_STALE: Duration = Duration::from_secs(5);

impl ControlState {
    /// Sets the engine gauges from the latest readings and the ledger.
    pub fn export_engine_metrics(&self) {
        let rows = self.core().targets(None, None, Instant::now());
        let board = self.engine.board();
        let readings: Vec<_> = rows.iter().map(|r| board.get(&r.slot.target)).collect();
        let gauge_rows: Vec<crate::engine::metrics::Row<'_>> = rows
            .iter()
            .zip(&readings)
            .map(|(r, reading)| crate::engine::metrics::Row {
                target: r.slot.target.to_string(),
                held: r.load.held_requests,
                reading: reading.as_ref(),
            })
            .collect();
        self.engine_metrics.export(&gauge_rows, Instant::now());
        self.metrics.sessions.export(self.core().sessions());
    }

    /// Publishes every live target's load (zero at start), so each target has its gauge
    /// series from the beginning rather than from its first booking.
    pub fn publish_loads(&self) {
        let rows = self.core().targets(None, None, Instant::now());
        for TargetRow { slot, load, .. } in rows {
            let change = LoadChange { target: slot.target, role: slot.worker.role, load };
            self.metrics.load(&change);
        }
    }

    /// Counts one failure against every target of each worker whose engine readings are stale,
    /// and against each rank whose readings are fresh but frozen while it holds requests (every
    /// second, with engine readings on).
    pub fn check_engines(&self) {
        let Some(interval) = self.engine.interval() else { return };
        let stale_after = (interval * STALE_POLLS).max(MIN_STALE);
        let now = Instant::now();
        let readings = self.engine.board().snapshot();
        let is_stale = |r: &crate::engine::Reading| now.saturating_duration_since(r.at) > stale_after;
        for (target, _) in readings
            .iter()
            .filter(|(_, r)| !is_stale(r) && r.load.holding() > 0 && r.clock.still_for(now) > stale_after)
        {
            let changed = self.core().engine_stuck(target, now);
            if let Some(t) = changed {
                self.ejections_changed(&[(target.clone(), t)]);
            }
        }
        let mut stale: Vec<infera_proto::types::WorkerId> =
            readings.into_iter().filter(|(_, r)| is_stale(r)).map(|(t, _)| t.worker).collect();
        stale.sort();
        stale.dedup();
        for worker in stale {
            let changed = self.core().engine_unreachable(&worker, now);
            self.ejections_changed(&changed);
        }
    }
}

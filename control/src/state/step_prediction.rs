//! The decode step each fitted worker's load predicts, compared with what its engine measured
//! (`crate::fit::predict`, `infera_router_decode_step_*`): the prediction fleet-wide admission
//! is to stand on, checked against the truth on every poll interval.

use super::ControlState;
use crate::fit::predict::{RankLoad, predictor};

impl ControlState {
    /// Each fitted worker's step as its fit predicts it from the ledger now, against the latest
    /// interval its engine measured (`crate::fit::predict`).
    pub(super) fn compare_step_predictions(&self, pools: &[crate::fit::PoolFit]) {
        let rows = self.targets(None, None);
        for pool in pools {
            for w in &pool.workers {
                // Only a fit that tracks the step predicts (`predict::predictor`): one without
                // load variety or R² (a CPU's noise) can predict anything, negative steps
                // included. Admission predicts with the same model.
                let (Some(fit), Some(interval)) = (predictor(&w.report), w.report.interval) else { continue };
                let ranks: Vec<RankLoad> = rows
                    .iter()
                    .filter(|r| r.slot.target.worker == w.worker)
                    .map(|r| RankLoad::from_ledger(&r.load))
                    .collect();
                if let Some(predicted) = fit.worker_step_ms(&ranks) {
                    let (model, worker) = (pool.model.as_str(), w.worker.as_str());
                    self.fit_metrics.prediction(model, worker, interval.at, predicted, interval.step_ms);
                }
            }
        }
    }
}

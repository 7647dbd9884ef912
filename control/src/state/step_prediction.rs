//! The decode step each fitted worker's load predicts, compared with what its engine measured
//! (`crate::fit::predict`, `infera_router_decode_step_*`): the prediction fleet-wide admission
//! is to stand on, checked against the truth on every poll interval, and the ITL it predicts
//! against the tightest target the worker's held requests were admitted under
//! (`infera_router_decode_itl_*`).

use super::ControlState;
use crate::fit::metrics::StepPrediction;
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
                let worker_rows = || rows.iter().filter(|r| r.slot.target.worker == w.worker);
                let ranks: Vec<RankLoad> = worker_rows().map(|r| RankLoad::from_ledger(&r.load)).collect();
                if let Some(predicted_ms) = fit.worker_step_ms(&ranks) {
                    let (model, worker) = (pool.model.as_str(), w.worker.as_str());
                    let prediction = StepPrediction {
                        at: interval.at,
                        predicted_ms,
                        measured_ms: interval.step_ms,
                        predicted_itl_ms: fit.itl_ms(predicted_ms),
                        itl_limit_ms: worker_rows().filter_map(|r| r.itl_limit_ms).min(),
                    };
                    self.fit_metrics.prediction(model, worker, prediction);
                }
            }
        }
    }
}

//! What control says about the decode while the window runs: every `EVERY`, the step its fit
//! predicts from the ledger (`infera_router_decode_step_predicted_ms`) and the step the engine
//! measured over its latest interval (`…_measured_ms`). A prediction is the ledger's view of
//! what was admitted: a sample above the ITL target is an admission beyond the predicted limit.

use std::time::Duration;

use infera_testkit::Control;
use infera_testkit::http::metric_sum;

/// How often control is read.
pub(crate) const EVERY: Duration = Duration::from_millis(200);

/// One reading of the decode worker's step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepSample {
    /// What the fit predicts from the ledger, ms.
    pub(crate) predicted_ms: f64,
    /// What the engine measured, ms.
    pub(crate) measured_ms: f64,
}

/// The decode's step as control's `/metrics` text gives it (`None` before its fit predicted one:
/// control exports a prediction only from a fit that tracks the step, the one admission uses).
pub(crate) fn step(metrics: &str, model: &str) -> Option<StepSample> {
    let labels = format!("model=\"{model}\"");
    let has = |name: &str| metrics.lines().any(|l| l.starts_with(name) && l.contains(&labels));
    if !has("infera_router_decode_step_predicted_ms{") {
        return None;
    }
    Some(StepSample {
        predicted_ms: metric_sum(metrics, "infera_router_decode_step_predicted_ms", &labels),
        measured_ms: metric_sum(metrics, "infera_router_decode_step_measured_ms", &labels),
    })
}

/// Reads `control`'s `/metrics` every [`EVERY`] for `window`.
///
/// # Errors
/// When control does not answer.
pub(crate) async fn steps(
    control: &Control,
    model: &str,
    window: Duration,
) -> anyhow::Result<Vec<StepSample>> {
    let end = tokio::time::Instant::now() + window;
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(EVERY);
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        if let Some(s) = step(&control.metrics().await?, model) {
            samples.push(s);
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_read_only_once_predicted() {
        let before = "infera_router_decode_step_measured_ms{model=\"m\",worker=\"d\"} 43.0\n";
        assert!(step(before, "m").is_none());
        let after = "infera_router_decode_request_weight_fit_trusted{model=\"m\",worker=\"d\"} 0\n\
                     infera_router_decode_step_predicted_ms{model=\"m\",worker=\"d\"} 44.5\n\
                     infera_router_decode_step_measured_ms{model=\"m\",worker=\"d\"} 43.0\n";
        let s = step(after, "m").unwrap();
        assert_eq!((s.predicted_ms, s.measured_ms), (44.5, 43.0));
    }
}

//! What control says about the decode while the window runs: every `EVERY`, the step its fit
//! predicts from the ledger (`infera_router_decode_step_predicted_ms`), the ITL that step gives a
//! request (`infera_router_decode_itl_predicted_ms`: over the tokens a request gains a step, as
//! control's fit reads them) and the step the engine measured over its latest interval
//! (`…_measured_ms`). A prediction is the ledger's view of what was admitted: a sample whose
//! predicted ITL is above the target is an admission beyond the predicted limit.

use std::time::Duration;

use infera_testkit::Control;
use infera_testkit::http::{get_json, metric_sum};
use serde_json::Value;

/// How often control is read.
pub(crate) const EVERY: Duration = Duration::from_millis(200);

/// One reading of the decode worker's step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepSample {
    /// What the fit predicts from the ledger, ms.
    pub(crate) predicted_ms: f64,
    /// The ITL that step gives a request, ms.
    pub(crate) predicted_itl_ms: f64,
    /// What the engine measured, ms.
    pub(crate) measured_ms: f64,
}

/// The decode's step as control's `/metrics` text gives it (`None` before its fit predicted one:
/// control exports a prediction only from a fit that tracks the step, the one admission uses).
pub(crate) fn step(metrics: &str, model: &str) -> Option<StepSample> {
    let labels = format!("model=\"{model}\"");
    Some(StepSample {
        predicted_ms: gauge(metrics, "infera_router_decode_step_predicted_ms", model)?,
        predicted_itl_ms: metric_sum(metrics, "infera_router_decode_itl_predicted_ms", &labels),
        measured_ms: metric_sum(metrics, "infera_router_decode_step_measured_ms", &labels),
    })
}

/// The engine's measured step alone (`None` before control has read one): what is there to
/// sample when control routed nothing (the SMG arm), so its ledger predicts nothing.
pub(crate) fn measured(metrics: &str, model: &str) -> Option<f64> {
    gauge(metrics, "infera_router_decode_step_measured_ms", model)
}

/// `model`'s series of the gauge `name`, summed; `None` when control exports none yet.
fn gauge(metrics: &str, name: &str, model: &str) -> Option<f64> {
    let labels = format!("model=\"{model}\"");
    let series = format!("{name}{{");
    metrics
        .lines()
        .any(|l| l.starts_with(&series) && l.contains(&labels))
        .then(|| metric_sum(metrics, name, &labels))
}

/// Reads `control`'s `/metrics` every [`EVERY`] for `window`: with `predicted`, the samples
/// that carry a prediction; without, the measured step alone (the prediction NaN).
///
/// # Errors
/// When control does not answer.
pub(crate) async fn steps(
    control: &Control,
    model: &str,
    window: Duration,
    predicted: bool,
) -> anyhow::Result<Vec<StepSample>> {
    let end = tokio::time::Instant::now() + window;
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(EVERY);
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        let text = control.metrics().await?;
        let sample = if predicted {
            step(&text, model)
        } else {
            measured(&text, model).map(|measured_ms| StepSample {
                predicted_ms: f64::NAN,
                predicted_itl_ms: f64::NAN,
                measured_ms,
            })
        };
        samples.extend(sample);
    }
    Ok(samples)
}

/// Tokens a request gains per decode step, from the engine's `decode_moments` in `loads` (its
/// `/v1/loads`): Σ generated over Σ batch, every rank together, as control's fit reads it
/// (more than 1 under speculative decoding); 1 before any decode step.
pub(crate) fn tokens_per_step(loads: &Value) -> f64 {
    let (mut batch, mut generated) = (0.0, 0.0);
    for m in loads["loads"].as_array().into_iter().flatten().filter_map(|l| l["decode_moments"].as_array()) {
        batch += m.get(1).and_then(Value::as_f64).unwrap_or(0.0);
        generated += m.get(5).and_then(Value::as_f64).unwrap_or(0.0);
    }
    if batch > 0.0 && generated > 0.0 { generated / batch } else { 1.0 }
}

/// [`tokens_per_step`] of the decode engine at `url`.
///
/// # Errors
/// When it does not answer.
pub(crate) async fn engine_tokens_per_step(url: &str) -> anyhow::Result<f64> {
    Ok(tokens_per_step(&get_json(&format!("{url}/v1/loads")).await?))
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
                     infera_router_decode_itl_predicted_ms{model=\"m\",worker=\"d\"} 12.7\n\
                     infera_router_decode_step_measured_ms{model=\"m\",worker=\"d\"} 43.0\n";
        let s = step(after, "m").unwrap();
        assert_eq!((s.predicted_ms, s.predicted_itl_ms, s.measured_ms), (44.5, 12.7, 43.0));
        assert_eq!(measured(before, "m"), Some(43.0), "measured without a prediction");
        assert_eq!(measured("", "m"), None);
    }

    #[test]
    fn tokens_per_step_are_generated_over_batch_across_ranks() {
        let loads = serde_json::json!({"loads": [
            {"dp_rank": 0, "decode_moments": [10.0, 40.0, 4e5, 0.0, 0.0, 140.0]},
            {"dp_rank": 1, "decode_moments": [10.0, 60.0, 4e5, 0.0, 0.0, 210.0]},
            {"dp_rank": 2, "decode_moments": null},
        ]});
        assert_eq!(tokens_per_step(&loads), 3.5);
        assert_eq!(tokens_per_step(&serde_json::json!({"loads": []})), 1.0, "no step yet");
    }
}

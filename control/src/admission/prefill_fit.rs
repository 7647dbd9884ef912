//! How long a prefill phase takes given the queue it joins: per model, a decayed least-squares
//! line `phase_ms = a + b · x` over the finished prefills, where `x` is the tokens booked on the
//! chosen prefill target when it was picked plus its own. Under saturation `b` is the inverse of
//! the prefill's throughput; with no queue, `a + b · tokens` is the bare compute. Fleet admission
//! predicts from it what a request would wait for its first token behind the prefill queue as
//! it stands (`manual/features/service_classes.md`). Pure.

use std::collections::HashMap;

use infera_proto::types::ModelName;

/// Each new sample weighs this much more than the one before it (a half-life of ~70 samples).
const DECAY: f64 = 0.99;
/// Samples before a line predicts.
const MIN_SAMPLES: f64 = 32.0;

/// One model's decayed sums.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    n: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

/// Per model, the prefill phase as a line in the tokens ahead of and in the request.
#[derive(Clone, Debug, Default)]
pub struct PrefillFits {
    by_model: HashMap<ModelName, Sums>,
}

impl PrefillFits {
    /// A prefill of `model` that found `tokens` (queued ahead, plus its own) took `phase_ms`.
    pub fn observe(&mut self, model: &ModelName, tokens: u64, phase_ms: f64) {
        let s = self.by_model.entry(model.clone()).or_default();
        let x = tokens as f64;
        *s = Sums {
            n: s.n * DECAY + 1.0,
            x: s.x * DECAY + x,
            y: s.y * DECAY + phase_ms,
            xx: s.xx * DECAY + x * x,
            xy: s.xy * DECAY + x * phase_ms,
        };
    }

    /// The phase (ms) a prefill of `model` finding `tokens` ahead of and in it is predicted to
    /// take; `None` before enough prefills, or when the line does not rise with the queue.
    pub fn predict_ms(&self, model: &ModelName, tokens: u64) -> Option<f64> {
        let s = self.by_model.get(model)?;
        if s.n < MIN_SAMPLES {
            return None;
        }
        let var = s.xx / s.n - (s.x / s.n).powi(2);
        if var <= 0.0 {
            return None;
        }
        let b = (s.xy / s.n - s.x / s.n * s.y / s.n) / var;
        let a = s.y / s.n - b * s.x / s.n;
        (b > 0.0).then(|| (a + b * tokens as f64).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_found_from_the_queue_each_prefill_joined() {
        let m = ModelName::new("m");
        let mut fits = PrefillFits::default();
        // 50 ms of overhead and 10,000 tokens a second.
        for i in 0..200u64 {
            let tokens = 1_000 + (i * 7_919) % 40_000;
            fits.observe(&m, tokens, 50.0 + tokens as f64 / 10.0);
            if i < 31 {
                assert_eq!(fits.predict_ms(&m, 10_000), None, "too few prefills yet");
            }
        }
        let p = fits.predict_ms(&m, 20_000).unwrap();
        assert!((p - 2_050.0).abs() < 1.0, "{p}");
        assert_eq!(fits.predict_ms(&ModelName::new("other"), 1), None);
    }

    #[test]
    fn a_queue_that_does_not_slow_prefills_predicts_nothing() {
        let m = ModelName::new("m");
        let mut fits = PrefillFits::default();
        for i in 0..100u64 {
            fits.observe(&m, 1_000 + i * 100, 80.0);
        }
        assert_eq!(fits.predict_ms(&m, 5_000), None);
    }
}

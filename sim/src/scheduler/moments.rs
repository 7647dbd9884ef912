//! SGLang's decode step-time moments, per DP rank: six running sums `[steps, Σ batch, Σ step_us,
//! Σ batch², Σ batch·step_us, Σ generated]` that `/v1/loads` reports as `decode_moments` (null
//! before the first), kept as SGLang's scheduler keeps them (`_accumulate_decode_moment` and
//! the step record around it in `python/sglang/srt/managers/scheduler.py`, SGLang 0.5.23; the
//! same sums in 0.5.18):
//!
//! - decode batches only; a batch counts when it was launched right after the rank's previous
//!   decode batch (consecutive forward iterations, no idle gap between): `step_us` is launch to
//!   launch, so the first batch after an idle spell or a prefill counts nothing;
//! - a `step_us` of 2 s or more (`STEP_MAX_US`) is dropped, as is an empty batch;
//! - `batch` is the batch's request count, `generated` the tokens it produced (more than the
//!   batch under speculative decoding).
//!
//! Times are the sim's model time (what its timing reports), in whole microseconds as SGLang
//! truncates them.

use std::time::Duration;

/// SGLang's cap on a decode step's cadence (`STEP_MAX_US`).
const STEP_MAX_US: u64 = 2_000_000;

/// One rank's moment sums and its last decode launch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodeMoments {
    /// `[steps, Σ batch, Σ step_us, Σ batch², Σ batch·step_us, Σ generated]`.
    pub totals: [f64; 6],
    /// When this rank's latest decode batch was launched, if the batch before the current one
    /// was a decode batch of this rank launched back to back (what `contiguous` is in SGLang).
    last_launch: Option<Duration>,
}

/// The launch of one rank's decode batch, remembered until the batch's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Launch {
    /// When it launched.
    pub(super) at: Duration,
    /// The previous contiguous launch of the rank, if there was one.
    pub(super) previous: Option<Duration>,
    /// Requests in the batch.
    pub(super) batch: u32,
}

impl DecodeMoments {
    /// A decode batch of `batch` requests launches at `at`; `contiguous`: the rank's previous
    /// batch was a decode batch that ended at `at` (no idle pass, no prefill between).
    pub(super) fn launch(&mut self, at: Duration, batch: u32, contiguous: bool) -> Launch {
        let previous = if contiguous { self.last_launch } else { None };
        self.last_launch = (batch > 0).then_some(at);
        Launch { at, previous, batch }
    }

    /// The rank ran no decode batch in a step (idle, or prefilling): the next one is not
    /// contiguous.
    pub(super) fn gap(&mut self) {
        self.last_launch = None;
    }

    /// The result of the batch `launch` describes: `generated` tokens.
    pub(super) fn result(&mut self, launch: Launch, generated: u64) {
        let Some(previous) = launch.previous else { return };
        let step_us = launch.at.saturating_sub(previous).as_micros() as u64;
        if launch.batch == 0 || step_us == 0 || step_us >= STEP_MAX_US {
            return;
        }
        let (b, t, g) = (f64::from(launch.batch), step_us as f64, generated as f64);
        let s = &mut self.totals;
        s[0] += 1.0;
        s[1] += b;
        s[2] += t;
        s[3] += b * b;
        s[4] += b * t;
        s[5] += g;
    }

    /// What `/v1/loads` reports: the sums, or `None` before the first counted step.
    pub fn reported(&self) -> Option<[f64; 6]> {
        (self.totals[0] > 0.0).then_some(self.totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn launch_to_launch_of_back_to_back_decode_batches_is_counted() {
        let mut m = DecodeMoments::default();
        // First batch after idle: nothing to measure from.
        let l0 = m.launch(ms(100), 4, false);
        m.result(l0, 4);
        assert_eq!(m.reported(), None);
        let l1 = m.launch(ms(140), 4, true);
        m.result(l1, 12);
        let l2 = m.launch(ms(185), 6, true);
        m.result(l2, 18);
        assert_eq!(m.reported(), Some([2.0, 10.0, 85_000.0, 52.0, 4.0 * 40_000.0 + 6.0 * 45_000.0, 30.0]));
    }

    #[test]
    fn gaps_and_long_steps_count_nothing() {
        let mut m = DecodeMoments::default();
        let l = m.launch(ms(0), 2, false);
        m.result(l, 2);
        m.gap(); // an idle pass or a prefill batch between
        let l = m.launch(ms(40), 2, true);
        m.result(l, 2);
        assert_eq!(m.reported(), None, "not contiguous after a gap");
        let l = m.launch(ms(2_040), 2, true);
        m.result(l, 2);
        assert_eq!(m.reported(), None, "2 s or more is dropped");
        let l = m.launch(ms(2_080), 2, true);
        m.result(l, 2);
        assert_eq!(m.reported().unwrap()[0], 1.0);
    }
}

//! The timing formulas: decode step, prefill batch, KV transfer. Pure functions of
//! [`TimingParams`] and loads; durations are model time (the engine divides by the speedup).
//!
//! Decode step, lockstep over all DP ranks, paced by the busiest rank:
//!
//! ```text
//! x_r     = running_requests_r + context_tokens_r / context_tokens_per_request
//! x       = max_r x_r
//! step_ms = step_base_ms + step_ms_per_request · x + step_ms_above_knee · max(0, x − knee)
//!         = 31.2 + 1.55·x + 4.35·max(0, x − 8)            (original study: 6/8/9 → 40.5/43.6/49.5 ms)
//! ```
//!
//! Prefill batch (one chunk of at most `--chunked-prefill-size` new tokens, possibly several
//! requests `i` with `n_i` new tokens each):
//!
//! ```text
//! batch_ms = prefill_batch_ms + Σ_i (prefill_ms_per_token · n_i + prefill_ms_per_token2 · n_i²)
//! ```
//!
//! KV transfer: `tokens × kv_bytes_per_token / kv_bandwidth_bytes_per_s`.

use std::time::Duration;

use crate::params::TimingParams;

/// What one DP rank's decode batch holds at the start of a step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RankLoad {
    /// Requests decoding on the rank.
    pub requests: u32,
    /// Their context (prompt + generated tokens), summed.
    pub context_tokens: u64,
}

/// The busiest rank's load in requests: `max_r (requests_r + context_r / context_tokens_per_request)`.
pub fn busiest(params: &TimingParams, ranks: &[RankLoad]) -> f64 {
    ranks
        .iter()
        .map(|r| f64::from(r.requests) + r.context_tokens as f64 / params.context_tokens_per_request)
        .fold(0.0, f64::max)
}

/// Decode step time in model ms for a busiest-rank load of `x` requests.
pub fn step_ms_at(params: &TimingParams, x: f64) -> f64 {
    params.step_base_ms
        + params.step_ms_per_request * x
        + params.step_ms_above_knee * (x - params.step_knee_requests).max(0.0)
}

/// Decode step time in model ms for these rank loads.
pub fn step_ms(params: &TimingParams, ranks: &[RankLoad]) -> f64 {
    step_ms_at(params, busiest(params, ranks))
}

/// Inter-token latency in model ms: a step emits `mtp_acceptance` tokens per request.
pub fn itl_ms(params: &TimingParams, ranks: &[RankLoad]) -> f64 {
    step_ms(params, ranks) / params.mtp_acceptance
}

/// Prefill batch time in model ms for the new tokens each request contributes to the chunk.
pub fn prefill_batch_ms(params: &TimingParams, new_tokens: impl IntoIterator<Item = u32>) -> f64 {
    new_tokens.into_iter().fold(params.prefill_batch_ms, |ms, n| {
        let n = f64::from(n);
        ms + params.prefill_ms_per_token * n + params.prefill_ms_per_token2 * n * n
    })
}

/// KV transfer time in model time for `tokens` tokens.
pub fn kv_transfer(params: &TimingParams, tokens: u32) -> Duration {
    let secs = f64::from(tokens) * params.kv_bytes_per_token / params.kv_bandwidth_bytes_per_s;
    Duration::from_secs_f64(secs.max(0.0))
}

/// Model milliseconds as a [`Duration`].
pub fn ms(ms: f64) -> Duration {
    Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(requests: &[u32]) -> Vec<RankLoad> {
        requests.iter().map(|&requests| RankLoad { requests, context_tokens: 0 }).collect()
    }

    #[test]
    fn the_seeds_calibration_points_hold() {
        let p = TimingParams::default();
        for (n, want) in [(6, 40.5), (8, 43.6), (9, 49.5)] {
            let got = step_ms(&p, &ranks(&[1, n, 2]));
            assert!((got - want).abs() < 1e-9, "{n} requests: {got} ms, want {want}");
        }
    }

    #[test]
    fn the_curve_is_convex_above_the_knee() {
        let p = TimingParams::default();
        let slope_below = step_ms_at(&p, 8.0) - step_ms_at(&p, 7.0);
        let slope_above = step_ms_at(&p, 9.0) - step_ms_at(&p, 8.0);
        assert!(slope_above > slope_below * 3.0, "{slope_below} vs {slope_above}");
        // The straight fit misses the 8 → 9 jump by about 2 ms.
        let straight = |n: f64| 25.3 + 2.24 * n;
        assert!((step_ms_at(&p, 9.0) - straight(9.0)) > 1.5);
    }

    #[test]
    fn one_request_is_worth_1_05m_context_tokens() {
        let p = TimingParams::default();
        let by_requests = step_ms(&p, &[RankLoad { requests: 4, context_tokens: 0 }]);
        let by_context = step_ms(&p, &[RankLoad { requests: 3, context_tokens: 1_050_000 }]);
        assert!((by_requests - by_context).abs() < 1e-9);
    }

    #[test]
    fn the_busiest_rank_paces_the_step() {
        let p = TimingParams::default();
        assert_eq!(step_ms(&p, &ranks(&[9, 0, 0, 0])), step_ms(&p, &ranks(&[9, 9, 9, 9])));
        assert!(step_ms(&p, &ranks(&[9, 0])) > step_ms(&p, &ranks(&[5, 4])));
        assert!((itl_ms(&p, &ranks(&[6])) - 40.5 / 3.61).abs() < 1e-9);
    }

    #[test]
    fn prefill_grows_with_new_tokens_and_transfer_with_bytes() {
        let p = TimingParams::default();
        assert_eq!(prefill_batch_ms(&p, []), p.prefill_batch_ms);
        let one = prefill_batch_ms(&p, [8192]);
        assert!((one - (5.0 + 0.06 * 8192.0 + 2e-6 * 8192.0 * 8192.0)).abs() < 1e-9);
        assert!(prefill_batch_ms(&p, [4096, 4096]) < one);
        let t = kv_transfer(&p, 100_000);
        assert!((t.as_secs_f64() - 100_000.0 * 70_272.0 / 25e9).abs() < 1e-9);
    }
}

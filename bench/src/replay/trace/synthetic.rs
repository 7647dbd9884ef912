//! Small synthetic traces the bench generates itself, so that no command needs a file from
//! outside the repository: the default of `--trace` (`builtin:mooncake`, `builtin:agentic`).
//!
//! **They are not the real traces.** They imitate the shape of the public ones described in
//! the traces' README (the record formats exactly, the statistics roughly), so every command
//! runs end to end on them; numbers worth quoting come from the real traces, which
//! `cargo xtask traces` fetches into `traces/` (then `--trace traces/…`).
//!
//! - [`mooncake`] imitates the Mooncake FAST'25 *conversation* trace: open-loop arrivals at
//!   ~3.4 requests/s quantised to 3-s ticks, every request starting with the shared
//!   system-prompt block 0, some conversations with a shared longer prefix, multi-turn
//!   conversations that resend their earlier turns; input lengths around a ~6–7k median (p90
//!   ~26k), output lengths around a ~350 median, about a third of the blocks reused. 512-token blocks,
//!   `len(hash_ids) == ceil(input_length / 512)`, ids prefix-chained and numbered in order of
//!   first appearance.
//! - [`agentic`] imitates the kv-cache-tester "Weka" v8 agentic sessions: one session per
//!   line, 10–60 requests each, a first input of ~20k tokens (tools + system prompt + task)
//!   that grows turn by turn by the previous output and a tool result, output median ~200,
//!   think times mostly seconds (tool runs) and sometimes minutes (a person), 64-token blocks
//!   with `len(hash_ids) == floor(in / 64)` in the v8 `"local"` id scope (ids restart at 1 in
//!   every session). No sub-agent markers.
//!
//! Both are pure functions of the random source they are given; the built-in traces use a
//! fixed [`SEED`], so every run of a built-in trace replays the same requests.

pub(crate) mod agentic;
pub(crate) mod mooncake;

use rand::Rng;

/// The seed of the built-in traces.
pub(crate) const SEED: u64 = 0x7ace_2026;

/// Requests of the built-in Mooncake-shaped trace (~5 minutes at ~3.4 requests/s): what
/// `kv-study` replays by default (`--requests 1000`).
pub(crate) const MOONCAKE_REQUESTS: usize = 1_000;

/// Sessions of the built-in agentic trace. `study decode-weight` runs up to 88 × 1.5 = 132
/// lanes at once (the scale-out and mixed-DP scenarios) and a lane goes through about two
/// sessions in the default 1,000 emulated seconds at the seed load point: 300 leaves every lane
/// a session of its own.
pub(crate) const AGENTIC_SESSIONS: usize = 300;

/// A log-normal draw with this median and log-space standard deviation, clamped to
/// `[lo, hi]` and rounded.
pub(crate) fn log_normal(rng: &mut impl Rng, median: f64, sigma: f64, lo: u32, hi: u32) -> u32 {
    (median * (sigma * normal(rng)).exp()).round().clamp(f64::from(lo), f64::from(hi)) as u32
}

/// A log-normal draw in seconds (unrounded), clamped to `[0, hi]`.
pub(crate) fn log_normal_s(rng: &mut impl Rng, median: f64, sigma: f64, hi: f64) -> f64 {
    (median * (sigma * normal(rng)).exp()).clamp(0.0, hi)
}

/// A standard normal draw (Box–Muller; `1 − u` keeps the logarithm's argument in (0, 1]).
fn normal(rng: &mut impl Rng) -> f64 {
    let (u, v): (f64, f64) = (1.0 - rng.random::<f64>(), rng.random());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng as _;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn a_seed_gives_the_same_traces_and_another_seed_others() {
        let moon = |seed| mooncake::generate(&mut StdRng::seed_from_u64(seed), 200);
        assert_eq!(moon(1), moon(1));
        assert_ne!(moon(1), moon(2));
        let agents = |seed| agentic::Sessions::new(StdRng::seed_from_u64(seed), 4).collect::<Vec<_>>();
        assert_eq!(agents(1), agents(1));
        assert_ne!(agents(1), agents(2));
    }

    #[test]
    fn log_normal_draws_sit_around_their_median_within_the_clamp() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut v: Vec<u32> = (0..4_001).map(|_| log_normal(&mut rng, 1_000.0, 1.0, 10, 50_000)).collect();
        v.sort_unstable();
        assert!((900..1_100).contains(&v[2_000]), "median {}", v[2_000]);
        assert!(v[0] >= 10 && v[4_000] <= 50_000);
    }
}

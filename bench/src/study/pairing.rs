//! Paired runs: what run r of every arm shares (seed, trace window, the arms' order), and the
//! screen that picks the peers the later runs keep.

use super::arm::Arm;
use super::{ArmRun, DecodeWeightArgs, stats};

/// What run `run` of every arm shares: the seed and the trace window, and the order its arms
/// run in (drawn from the seed, so a rerun repeats it).
pub(crate) struct Pairing {
    /// 1-based.
    pub(crate) run: usize,
    pub(crate) seed: u64,
    /// Sessions of the trace skipped (and replayed after its end).
    pub(crate) session_offset: usize,
}

impl Pairing {
    pub(super) fn of(args: &DecodeWeightArgs, run: usize) -> Self {
        Self { run, seed: args.seed + run as u64 - 1, session_offset: (run - 1) * args.window_stride }
    }

    /// `arms` shuffled by the run's seed.
    pub(super) fn order(&self, arms: &[Arm]) -> Vec<Arm> {
        use rand::SeedableRng as _;
        use rand::seq::SliceRandom as _;
        let mut order = arms.to_vec();
        order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(self.seed ^ 0x5eed_0bde));
        order
    }
}

/// After the screen (run 1 of every arm): the recommended arm and the `--screen-keep` peer arms
/// with the highest p90 interactivity among those that serve the load (tok/s within
/// [`stats::THROTTLED_SHARE`] of the best-serving peer's), and nothing else.
pub(super) fn screened(args: &DecodeWeightArgs, done: &[ArmRun]) -> Vec<Arm> {
    let peers: Vec<&ArmRun> = done.iter().filter(|a| a.arm.is_peer()).collect();
    let serving =
        stats::serves_the_load(&peers.iter().map(|a| a.report.total_tokens_per_s).collect::<Vec<_>>());
    let mut eligible: Vec<(Arm, f64)> = peers
        .iter()
        .zip(serving)
        .filter(|(_, serves)| *serves)
        .map(|(a, _)| (a.arm, a.report.interactivity.p90.unwrap_or(0.0)))
        .collect();
    eligible.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut keep = vec![args.recommended];
    keep.extend(eligible.into_iter().take(args.screen_keep).map(|(a, _)| a));
    keep
}

#[cfg(test)]
mod tests {
    use clap::{Parser as _, ValueEnum as _};

    use super::super::scenario::Scenario;
    use super::super::{LoadPoint, StudyArgs, Which};
    use super::Pairing;
    use crate::replay::trace::{Builtin, Source, synthetic};

    /// Without `--trace` the study runs on the built-in agentic trace, which has two sessions for
    /// every lane of every scenario at the default concurrency and a window of its own for each
    /// of five runs.
    #[test]
    fn the_default_trace_is_the_builtin_one_and_fills_every_lane() {
        let parsed = crate::Args::try_parse_from(["infera-bench", "study", "decode-weight"]).unwrap();
        let crate::Cmd::Study(StudyArgs { study: Which::DecodeWeight(args) }) = parsed.command else {
            panic!("not the study")
        };
        assert_eq!(args.trace, Source::Builtin(Builtin::Agentic));
        args.validate().unwrap();
        for scenario in Scenario::value_variants() {
            let topology = scenario.topology(args.decode_ranks, args.kv_pressure_tokens, args.window());
            let (shaping, _) = args.shaping(LoadPoint::Published, &topology, args.concurrency[0]).unwrap();
            assert!(2 * shaping.concurrency <= synthetic::AGENTIC_SESSIONS, "{}", scenario.name());
        }
        assert!(Pairing::of(&args, 5).session_offset < synthetic::AGENTIC_SESSIONS);
        let steady = Scenario::Steady.topology(args.decode_ranks, args.kv_pressure_tokens, args.window());
        let (shaping, seed) = args.shaping(LoadPoint::Seed, &steady, 132).unwrap();
        let seed = seed.unwrap();
        assert_eq!(
            (seed.sessions, shaping.concurrency),
            (args.seed_sessions, 132),
            "the scales of 88 sessions"
        );
        assert!(shaping.output_scale > 1.0 && shaping.think_time_scale > 0.0, "{seed}");
    }
}

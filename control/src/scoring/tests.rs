use infera_proto::types::{DecodePolicy, RequestWeight};
use rand::{SeedableRng, rngs::SmallRng};

use super::*;

fn cand(position: usize, tokens: u64, held: u64) -> Candidate {
    Candidate::new(
        TargetKey::from_index(position as u32),
        position,
        Load { booked_input_tokens: tokens, held_requests: held, ..Load::default() },
        1,
    )
}

#[test]
fn cost_adds_weight_times_held_requests() {
    let load = Load { booked_input_tokens: 1_000, held_requests: 3, ..Load::default() };
    assert_eq!(decode_cost(load, 500, RequestWeight::ZERO), 1_500.0);
    assert_eq!(decode_cost(load, 500, RequestWeight::new(1e6).unwrap()), 3_001_500.0);
}

#[test]
fn weight_prefers_fewer_requests_over_fewer_tokens() {
    // Rank 0: one long request. Rank 1: many short ones with fewer tokens in total.
    let cands = [cand(0, 100_000, 1), cand(1, 60_000, 12)];
    let mut rng = SmallRng::seed_from_u64(1);
    let pick = |w: f64, rng: &mut SmallRng| {
        let w = RequestWeight::new(w).unwrap();
        lowest(cands.iter().map(|c| decode_cost(c.load, 1_000, w)), rng).unwrap().0
    };
    assert_eq!(pick(0.0, &mut rng), 1, "token-only demand picks the rank with fewer tokens");
    assert_eq!(pick(1e6, &mut rng), 0, "W = 1M picks the rank with fewer requests");
}

#[test]
fn ties_broken_by_seed_and_uniformly() {
    let costs = [5.0, 3.0, 3.0, 9.0, 3.0];
    let mut counts = [0u32; 5];
    let mut rng = SmallRng::seed_from_u64(42);
    for _ in 0..3_000 {
        counts[lowest(costs, &mut rng).unwrap().0] += 1;
    }
    assert_eq!(counts[0] + counts[3], 0, "never a costlier candidate");
    for i in [1, 2, 4] {
        assert!((800..1_200).contains(&counts[i]), "tie {i} chosen {} times of 3000", counts[i]);
    }
    // The same seed gives the same sequence.
    let seq = |seed| {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..20).map(|_| lowest(costs, &mut rng).unwrap().0).collect::<Vec<_>>()
    };
    assert_eq!(seq(7), seq(7));
    assert_eq!(lowest(std::iter::empty(), &mut rng), None);
}

#[test]
fn round_robin_cycles_and_skips_ineligible_positions() {
    let mut rng = SmallRng::seed_from_u64(0);
    // Pool of 4; position 2 is drained, so it is not among the candidates.
    let cands = [cand(0, 0, 0), cand(1, 0, 0), cand(3, 0, 0)];
    let mut cursor = 0;
    let picks: Vec<usize> = (0..6)
        .map(|_| cands[legacy(DecodePolicy::RoundRobin, &cands, &mut cursor, 4, &mut rng)].position)
        .collect();
    assert_eq!(picks, [0, 1, 3, 0, 1, 3]);
}

#[test]
fn power_of_two_never_picks_the_most_loaded_of_three() {
    let mut rng = SmallRng::seed_from_u64(3);
    let cands = [cand(0, 0, 9), cand(1, 0, 1), cand(2, 0, 5)];
    let mut cursor = 0;
    for _ in 0..200 {
        let i = legacy(DecodePolicy::PowerOfTwo, &cands, &mut cursor, 3, &mut rng);
        assert_ne!(i, 0, "the target holding 9 requests loses every pair it is in");
    }
}

#[test]
fn least_running_follows_the_engines_not_the_ledger_and_puts_unread_targets_last() {
    let mut rng = SmallRng::seed_from_u64(5);
    // The ledger says target 1 is the emptiest; its engine says it holds the most.
    let mut cands = [cand(0, 0, 4), cand(1, 0, 0), cand(2, 0, 4), cand(3, 0, 0)];
    for (c, engine) in cands.iter_mut().zip([Some(3), Some(9), Some(2), None]) {
        c.engine_requests = engine;
    }
    let mut cursor = 0;
    for _ in 0..50 {
        assert_eq!(legacy(DecodePolicy::LeastRunning, &cands, &mut cursor, 4, &mut rng), 2);
    }
    // Equal readings: both taken, at random.
    cands[0].engine_requests = Some(2);
    let mut seen = [false; 4];
    for _ in 0..100 {
        seen[legacy(DecodePolicy::LeastRunning, &cands, &mut cursor, 4, &mut rng)] = true;
    }
    assert_eq!(seen, [true, false, true, false]);
    // No reading anywhere: any of them.
    cands.iter_mut().for_each(|c| c.engine_requests = None);
    let i = legacy(DecodePolicy::LeastRunning, &cands, &mut cursor, 4, &mut rng);
    assert!(i < 4);
}

#[test]
fn random_covers_every_candidate() {
    let mut rng = SmallRng::seed_from_u64(9);
    let cands = [cand(0, 0, 0), cand(1, 0, 0), cand(2, 0, 0)];
    let mut seen = [false; 3];
    let mut cursor = 0;
    for _ in 0..100 {
        seen[legacy(DecodePolicy::Random, &cands, &mut cursor, 3, &mut rng)] = true;
    }
    assert_eq!(seen, [true; 3]);
}

#[test]
fn the_prefilling_weight_scales_what_is_still_in_prefill_and_one_changes_nothing() {
    use crate::settings::PrefillingWeight;
    use crate::target::Prefilling;
    let w = RequestWeight::new(1e6).unwrap();
    let load = Load {
        booked_input_tokens: 10_000,
        held_requests: 4,
        prefilling: Prefilling { requests: 3, tokens: 9_000 },
    };
    let alike = phased_decode_cost(load, load.prefilling.into(), 500, w, PrefillingWeight::ALIKE);
    assert_eq!(alike, decode_cost(load, 500, w));
    // Only what is past prefill: 1,000 tokens and 1 request.
    assert_eq!(
        phased_decode_cost(load, load.prefilling.into(), 500, w, PrefillingWeight::new(0.0).unwrap()),
        1_000.0 + 500.0 + 1e6
    );
    // Twice: 1,000 + 18,000 tokens, 1 + 6 requests.
    assert_eq!(
        phased_decode_cost(load, load.prefilling.into(), 500, w, PrefillingWeight::new(2.0).unwrap()),
        19_000.0 + 500.0 + 7e6
    );
    for bad in ["-0.1", "4.5", "nan", "inf", "x"] {
        assert!(bad.parse::<PrefillingWeight>().is_err(), "{bad}");
    }
    assert_eq!("0.25".parse::<PrefillingWeight>().unwrap().get(), 0.25);
}

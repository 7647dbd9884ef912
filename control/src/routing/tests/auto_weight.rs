//! `auto`: a decode pick of a pool with a fitted W scores and reports with it; a pool without
//! one uses the number set (the fallback); pinned ignores the fit.

use std::collections::HashMap;

use super::*;
use crate::fit::WeightMode;

#[test]
fn auto_picks_score_with_their_pools_fitted_w() {
    let workers = vec![worker("d", Role::Decode, "m", 2), worker("e", Role::Decode, "other", 1)];
    let mut f = Fixture::new(workers, settings(DecodeInputDemand::On, 5.0, DecodePolicy::RoundRobin));
    let fitted = RequestWeight::new(50_000.0).unwrap();
    f.core.weights_mut().set_fitted(HashMap::from([(ModelName::new("m"), fitted)]));
    f.core.weights_mut().set_mode(WeightMode::Auto);
    // Rank L holds one 100 k request; the next short ones go as with W = 50,000 pinned (see
    // on_mode_with_weight_balances_requests_not_just_tokens): O, O, O, then L.
    let long = rank(&f.decode(100_000));
    let shorts: String = (0..4).map(|_| if rank(&f.decode(10_000)) == long { 'L' } else { 'O' }).collect();
    assert_eq!(shorts, "OOOL");
    let p = f.decode(10_000);
    assert_eq!(p.weight, fitted);
    let d = p.decision.unwrap();
    assert_eq!(d.weight, fitted, "the decision shows the W used");
    // Another pool without a fit uses the fallback.
    assert_eq!(f.pick(PickKind::Decode, "other", 10).unwrap().weight.get(), 5.0);
    f.core.weights_mut().set_mode(WeightMode::Pinned);
    assert_eq!(f.decode(10_000).weight.get(), 5.0, "pinned: the number set");
}

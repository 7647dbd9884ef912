//! Tenant shares and Jain's fairness index over them.
//!
//! Each tenant `i` got `x_i` tokens and is owed the share `w_i / Σ w`. Jain's index over the
//! normalised allocations `a_i = x_i / w_i` is `(Σ a)² / (n · Σ a²)`: 1 when every tenant got
//! exactly its weight's share, `1/n` when one tenant got everything.

/// One tenant's tokens and weight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Allocation {
    /// Tokens it was served.
    pub(crate) tokens: f64,
    /// Its weight.
    pub(crate) weight: f64,
}

/// Jain's index over `allocations` relative to their weights (`None` when nothing was served).
pub(crate) fn jain(allocations: &[Allocation]) -> Option<f64> {
    let a: Vec<f64> = allocations.iter().map(|x| x.tokens / x.weight).collect();
    let sum: f64 = a.iter().sum();
    let squares: f64 = a.iter().map(|v| v * v).sum();
    (squares > 0.0).then(|| sum * sum / (a.len() as f64 * squares))
}

/// Each tenant's share of the tokens served (`None` when nothing was).
pub(crate) fn shares(allocations: &[Allocation]) -> Option<Vec<f64>> {
    let total: f64 = allocations.iter().map(|x| x.tokens).sum();
    (total > 0.0).then(|| allocations.iter().map(|x| x.tokens / total).collect())
}

/// Each tenant's share owed by its weight.
pub(crate) fn owed(allocations: &[Allocation]) -> Vec<f64> {
    let total: f64 = allocations.iter().map(|x| x.weight).sum();
    allocations.iter().map(|x| x.weight / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(f64, f64)]) -> Vec<Allocation> {
        pairs.iter().map(|&(tokens, weight)| Allocation { tokens, weight }).collect()
    }

    #[test]
    fn jain_is_one_at_the_weights_shares_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain(&of(&[(100.0, 1.0), (100.0, 1.0)])), Some(1.0));
        assert_eq!(jain(&of(&[(300.0, 3.0), (100.0, 1.0)])), Some(1.0));
        assert_eq!(jain(&of(&[(100.0, 1.0), (0.0, 1.0)])), Some(0.5));
        assert_eq!(jain(&of(&[(0.0, 1.0), (0.0, 1.0)])), None);
        // A flood that takes 9 tokens in 10 from an equal tenant.
        let j = jain(&of(&[(10.0, 1.0), (90.0, 1.0)])).unwrap();
        assert!((j - 100.0 * 100.0 / (2.0 * (100.0 + 8100.0))).abs() < 1e-12);
    }

    #[test]
    fn shares_are_of_the_tokens_served_and_owed_by_weight() {
        let a = of(&[(30.0, 3.0), (10.0, 1.0)]);
        assert_eq!(shares(&a), Some(vec![0.75, 0.25]));
        assert_eq!(owed(&a), vec![0.75, 0.25]);
        assert_eq!(shares(&of(&[(0.0, 1.0)])), None);
    }
}

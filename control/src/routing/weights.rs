//! Which W a decode pick uses: the number set (pinned), or its pool's fitted W (auto), with the
//! number set as the fallback of a pool without a trusted fit. The shell hands the core the
//! pools' fitted W as the fit moves ([`crate::fit`]); the core only looks them up, so a pick
//! stays a pure function of what the core holds.

use std::collections::HashMap;

use infera_proto::types::{ModelName, RequestWeight};

use crate::fit::WeightMode;

/// Pinned or fitted W.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodeWeights {
    mode: WeightMode,
    fitted: HashMap<ModelName, RequestWeight>,
}

impl DecodeWeights {
    /// How W is chosen.
    pub fn mode(&self) -> WeightMode {
        self.mode
    }

    /// Chooses W from now on.
    pub fn set_mode(&mut self, mode: WeightMode) {
        self.mode = mode;
    }

    /// The pools' fitted W, by model (pools missing have none yet).
    pub fn set_fitted(&mut self, fitted: HashMap<ModelName, RequestWeight>) {
        self.fitted = fitted;
    }

    /// The W a decode pick of `model` uses when the number set is `set`.
    pub fn for_pool(&self, model: &ModelName, set: RequestWeight) -> RequestWeight {
        match self.mode {
            WeightMode::Pinned => set,
            WeightMode::Auto => self.fitted.get(model).copied().unwrap_or(set),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_uses_the_pools_fit_and_falls_back_to_the_number_set() {
        let (m, other) = (ModelName::new("m"), ModelName::new("other"));
        let set = RequestWeight::new(5.0).unwrap();
        let fit = RequestWeight::new(1.05e6).unwrap();
        let mut w = DecodeWeights::default();
        w.set_fitted(HashMap::from([(m.clone(), fit)]));
        assert_eq!(w.for_pool(&m, set), set, "pinned ignores the fit");
        w.set_mode(WeightMode::Auto);
        assert_eq!((w.for_pool(&m, set), w.for_pool(&other, set)), (fit, set));
    }
}

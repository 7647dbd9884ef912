//! The local choice when control cannot answer a pick in time (or the proxy holds no lease):
//! from the last known target list, the eligible target with the fewest of this proxy's legs.

use std::sync::Mutex;

use infera_proto::types::{ModelName, PickKind, Target};
use rand::{SeedableRng, rngs::SmallRng};

use super::pick::PickError;
use crate::targets::{Endpoint, LocalLoad, TargetList};

/// The fallback's tie-breaking randomness.
#[derive(Debug)]
pub(super) struct Fallback {
    rng: Mutex<SmallRng>,
}

impl Fallback {
    /// Seeded from the OS.
    pub(super) fn new() -> Self {
        Self { rng: Mutex::new(SmallRng::from_os_rng()) }
    }

    /// The endpoint for a `kind` leg of `model`, or why there is none.
    pub(super) fn choose(
        &self,
        list: &TargetList,
        load: &LocalLoad,
        kind: PickKind,
        model: &ModelName,
        exclude: &[Target],
    ) -> Result<Endpoint, PickError> {
        let pd = list.is_pd(model);
        if pd.is_none() {
            return Err(if list.is_empty() { PickError::NoTarget } else { PickError::UnknownModel });
        }
        if kind == PickKind::Prefill && pd == Some(false) {
            return Err(PickError::NoPool);
        }
        if let Some(why) = list.no_pair(model) {
            return Err(PickError::NoCompatiblePair(format!(
                "model \"{model}\" has no prefill and decode that can pair (KV page size, transfer backend \
                 and KV cache dtype must agree); from the last target list control gave: {why}"
            )));
        }
        let chosen = load.choose(list, model, kind, exclude, &mut *self.rng.lock().expect("rng lock"));
        chosen.ok_or(PickError::NoTarget)
    }
}

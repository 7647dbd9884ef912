//! Fault knobs, set by flags at start and by `POST /sim/faults` at run time. Each data-plane
//! request takes a snapshot at admission.

use std::sync::Mutex;

use serde::{Deserialize, Deserializer, Serialize};

/// The fault knobs (`--sim-fail-next`, …, `POST /sim/faults`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Faults {
    /// The next N data-plane requests fail at once with 500.
    pub fail_next: u32,
    /// Every request stops emitting after K tokens and holds its connection.
    pub stall_after_tokens: Option<u32>,
    /// Every request's connection is closed abruptly after K tokens.
    pub die_after_tokens: Option<u32>,
    /// The scheduler hangs (a stuck kernel or collective): no request makes progress, new ones
    /// only queue, and `/v1/loads` answers the last snapshot it wrote, as SGLang's HTTP server
    /// does (0.5.23 reads the scheduler's shared-memory snapshot).
    pub hang: bool,
}

/// What one request got at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFaults {
    /// Fail now.
    Fail,
    /// Run, with these knobs.
    Run {
        /// Stall after K tokens.
        stall_after: Option<u32>,
        /// Die after K tokens.
        die_after: Option<u32>,
    },
}

/// A `POST /sim/faults` body: absent keys are left as they are; `null` clears a knob.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsUpdate {
    /// New `fail_next`.
    pub fail_next: Option<u32>,
    /// New `stall_after_tokens` (`Some(None)` clears it).
    #[serde(default, deserialize_with = "present")]
    pub stall_after_tokens: Option<Option<u32>>,
    /// New `die_after_tokens` (`Some(None)` clears it).
    #[serde(default, deserialize_with = "present")]
    pub die_after_tokens: Option<Option<u32>>,
    /// New `hang`.
    pub hang: Option<bool>,
}

/// A key that is present, possibly `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(d).map(Some)
}

/// The knobs shared by the request handlers.
#[derive(Debug, Default)]
pub struct FaultKnobs(Mutex<Faults>);

impl FaultKnobs {
    /// Knobs starting at `faults`.
    pub fn new(faults: Faults) -> Self {
        Self(Mutex::new(faults))
    }

    /// The current knobs.
    pub fn get(&self) -> Faults {
        *self.0.lock().unwrap()
    }

    /// Applies an update; returns the knobs now in force.
    pub fn update(&self, u: FaultsUpdate) -> Faults {
        let mut f = self.0.lock().unwrap();
        if let Some(n) = u.fail_next {
            f.fail_next = n;
        }
        if let Some(k) = u.stall_after_tokens {
            f.stall_after_tokens = k;
        }
        if let Some(k) = u.die_after_tokens {
            f.die_after_tokens = k;
        }
        if let Some(h) = u.hang {
            f.hang = h;
        }
        *f
    }

    /// The faults of a request admitted now (consumes one `fail_next`).
    pub fn admit(&self) -> RequestFaults {
        let mut f = self.0.lock().unwrap();
        if f.fail_next > 0 {
            f.fail_next -= 1;
            return RequestFaults::Fail;
        }
        RequestFaults::Run { stall_after: f.stall_after_tokens, die_after: f.die_after_tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_next_counts_down_and_updates_are_partial() {
        let knobs = FaultKnobs::new(Faults { fail_next: 1, ..Faults::default() });
        assert_eq!(knobs.admit(), RequestFaults::Fail);
        assert_eq!(knobs.admit(), RequestFaults::Run { stall_after: None, die_after: None });
        let u: FaultsUpdate = serde_json::from_str(r#"{"stall_after_tokens": 3}"#).unwrap();
        knobs.update(u);
        let u: FaultsUpdate = serde_json::from_str(r#"{"die_after_tokens": 2}"#).unwrap();
        assert_eq!(knobs.update(u).stall_after_tokens, Some(3));
        let u: FaultsUpdate = serde_json::from_str(r#"{"stall_after_tokens": null}"#).unwrap();
        assert_eq!(
            knobs.update(u),
            Faults { fail_next: 0, stall_after_tokens: None, die_after_tokens: Some(2), hang: false }
        );
    }
}

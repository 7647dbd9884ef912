//! The chaos bench's schedule, drawn from the seed before anything starts: when (as the number of
//! requests issued so far, so the same requests see the same faults in every run) each fault knob
//! of the faulty decode and the faulty prefill is set and cleared, and when the proxy, control and
//! etcd are taken down.
//!
//! The fault windows never overlap: the run between 5 % and 92 % of the requests is cut into one
//! slot per window, the windows are dealt to the slots in a seeded order, and each starts at a
//! random offset inside its slot and ends before the slot does. A failure (`fail_next`) is a burst
//! of that many 500s; a die (`die_after_tokens`) or stall (`stall_after_tokens`) window lasts a
//! drawn number of requests and is then cleared (`null`).

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};

/// Which sim a fault is set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Faulty {
    /// The faulty decode worker.
    Decode,
    /// The faulty prefill worker.
    Prefill,
}

/// One `POST /sim/faults`.
#[derive(Clone, Debug)]
pub(crate) struct FaultStep {
    /// Sent once this many requests were issued.
    pub(crate) at: usize,
    pub(crate) sim: Faulty,
    pub(crate) body: Value,
}

/// How many windows of each knob each faulty sim gets, and how long they last (in requests).
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    pub(crate) requests: usize,
    /// `fail_next` bursts per sim and their size.
    pub(crate) fails: usize,
    pub(crate) fail_burst: (u32, u32),
    /// Die windows per sim and their length.
    pub(crate) dies: usize,
    pub(crate) die_len: (usize, usize),
    /// Stall windows on the decode and on the prefill, and their length.
    pub(crate) decode_stalls: usize,
    pub(crate) prefill_stalls: usize,
    pub(crate) stall_len: (usize, usize),
    /// The decode's `die_after_tokens` / `stall_after_tokens` range (the prefill's are 0–1 and 0:
    /// a PD prefill makes one token).
    pub(crate) decode_after_tokens: (u32, u32),
}

/// The whole schedule.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    /// The fault steps, by `at`.
    pub(crate) faults: Vec<FaultStep>,
    /// The `stall_after_tokens` values the decode was given (its stalled requests stop there).
    pub(crate) decode_stall_tokens: Vec<u32>,
    /// Request counts at which the proxy is SIGKILLed, control is SIGKILLed and etcd is stopped.
    pub(crate) proxy_kill: usize,
    pub(crate) control_kill: usize,
    pub(crate) etcd_stop: usize,
}

#[derive(Clone, Copy, Debug)]
enum Window {
    Fail,
    Die,
    Stall,
}

impl Schedule {
    /// Draws the schedule of `shape` from `seed`.
    pub(crate) fn draw(shape: &Shape, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xC4A0_5EED);
        let n = shape.requests;
        let mut windows = Vec::new();
        for sim in [Faulty::Decode, Faulty::Prefill] {
            windows.extend(std::iter::repeat_n((sim, Window::Fail), shape.fails));
            windows.extend(std::iter::repeat_n((sim, Window::Die), shape.dies));
            let stalls = if sim == Faulty::Decode { shape.decode_stalls } else { shape.prefill_stalls };
            windows.extend(std::iter::repeat_n((sim, Window::Stall), stalls));
        }
        windows.shuffle(&mut rng);
        let (start, end) = (n * 5 / 100, n * 92 / 100);
        let slot = (end - start) / windows.len().max(1);
        let mut faults = Vec::new();
        let mut decode_stall_tokens = Vec::new();
        for (k, (sim, window)) in windows.into_iter().enumerate() {
            let slot_start = start + k * slot;
            let len = match window {
                Window::Fail => 0,
                Window::Die => rng.random_range(shape.die_len.0..=shape.die_len.1),
                Window::Stall => rng.random_range(shape.stall_len.0..=shape.stall_len.1),
            }
            .min(slot.saturating_sub(2));
            let at = slot_start + rng.random_range(0..=slot.saturating_sub(len + 1));
            let tokens = match sim {
                Faulty::Decode => rng.random_range(shape.decode_after_tokens.0..=shape.decode_after_tokens.1),
                Faulty::Prefill => 0,
            };
            let (on, off) = match window {
                Window::Fail => {
                    let burst = rng.random_range(shape.fail_burst.0..=shape.fail_burst.1);
                    (json!({ "fail_next": burst }), None)
                }
                Window::Die => {
                    // A prefill dies before its KV (0) or once the decode has pulled it (1).
                    let k = if sim == Faulty::Prefill { rng.random_range(0..=1) } else { tokens };
                    (json!({ "die_after_tokens": k }), Some(json!({ "die_after_tokens": null })))
                }
                Window::Stall => {
                    if sim == Faulty::Decode {
                        decode_stall_tokens.push(tokens);
                    }
                    (json!({ "stall_after_tokens": tokens }), Some(json!({ "stall_after_tokens": null })))
                }
            };
            faults.push(FaultStep { at, sim, body: on });
            if let Some(off) = off {
                faults.push(FaultStep { at: at + len, sim, body: off });
            }
        }
        faults.sort_by_key(|s| s.at);
        let mut at = |lo: usize, hi: usize| rng.random_range(n * lo / 100..n * hi / 100);
        let (proxy_kill, control_kill, etcd_stop) = (at(15, 25), at(40, 50), at(62, 72));
        Self { faults, decode_stall_tokens, proxy_kill, control_kill, etcd_stop }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            requests: 10_000,
            fails: 3,
            fail_burst: (3, 15),
            dies: 2,
            die_len: (40, 120),
            decode_stalls: 2,
            prefill_stalls: 2,
            stall_len: (8, 20),
            decode_after_tokens: (1, 6),
        }
    }

    #[test]
    fn the_schedule_is_seeded_and_its_windows_do_not_overlap() {
        let a = Schedule::draw(&shape(), 1);
        let b = Schedule::draw(&shape(), 1);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_ne!(format!("{a:?}"), format!("{:?}", Schedule::draw(&shape(), 2)));
        // 2 sims × (3 fails + 2 dies × 2 steps + 2 stalls × 2 steps).
        assert_eq!(a.faults.len(), 2 * (3 + 4 + 4));
        // Every knob that is set is cleared before the next window of any knob is set.
        let mut open: Option<(Faulty, &str)> = None;
        for s in &a.faults {
            let (key, value) = s.body.as_object().unwrap().iter().next().unwrap();
            match (open, value.is_null()) {
                (None, false) if key != "fail_next" => open = Some((s.sim, key.as_str())),
                (None, false) => {}
                (Some(o), true) => {
                    assert_eq!(o, (s.sim, key.as_str()));
                    open = None;
                }
                _ => panic!("overlapping windows at {}: {:?}", s.at, a.faults),
            }
        }
        assert!(a.proxy_kill < a.control_kill && a.control_kill < a.etcd_stop);
        assert_eq!(a.decode_stall_tokens.len(), 2);
    }
}

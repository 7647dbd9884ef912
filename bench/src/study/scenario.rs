//! The study's scenarios: the deployment each arm runs on and what happens to it during the
//! run. Every scenario keeps the original study's kit (a prefill of 4 GPUs, decodes of one GPU per
//! attention-DP rank) and the load point's trace shaping; what changes:
//!
//! | scenario | prefills | decodes (ranks) | routers | sessions | during the run |
//! |---|---|---|---|---|---|
//! | `steady` | 1 | 8 | 1 | ×1 | nothing |
//! | `scale-out` | 2 | 8 + 8 | 1 | ×1.5 | the second decode joins at 15 % of the measured window; the first is drained at 65 % |
//! | `mixed-dp` | 2 | 8 + 4 | 1 | ×1.5 | nothing |
//! | `kv-pressure` | 1 | 8, `--max-total-tokens` per rank | 1 | ×1 | nothing |
//! | `multi-proxy` | 1 | 8 | 4 | ×1 | nothing |
//! | `unsaturated-prefill` | 2 | 8 | 1 | ×1 | nothing |
//! | `classes` | 2 | 8 | 4 | ×1 | nothing |
//!
//! "Routers" is how many infera proxies share the one control, or how many SMG replicas each
//! route on their own; the replay spreads the sessions over them. Scale-out and mixed DP get
//! a second prefill and 1.5× the sessions so that the decodes, not the one prefill, are what
//! the load presses on (one prefill is saturated at the seed point already). The unsaturated
//! prefill is steady state with a second prefill: the prefill queue no longer holds requests
//! for minutes, which is what the ledger's age decay corrects for. `classes` is the service-class
//! family (`--batch-share`, swept with `--concurrency`): two prefills, so that past the knee the
//! decode is what binds, and four routers, each SMG replica admitting on its own.

use std::fmt;

/// A scenario of the study.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// One 8-rank decode, nothing changes.
    Steady,
    /// A second 8-rank decode joins under load; later the first is drained.
    ScaleOut,
    /// Two decodes of different DP sizes (8 and 4 ranks).
    MixedDp,
    /// The decode's KV capacity per rank is short of what the load would hold.
    KvPressure,
    /// Four routers in front of the same workers.
    MultiProxy,
    /// Steady state with two prefills, so the prefill keeps up.
    UnsaturatedPrefill,
    /// Two prefills and four routers: service classes where the decode binds.
    Classes,
}

/// One decode worker of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DecodeSpec {
    /// Its worker id (`decode-0`, …).
    pub(crate) name: String,
    pub(crate) ranks: u32,
    /// `--max-total-tokens` (KV tokens per rank), if bounded.
    pub(crate) kv_tokens: Option<u64>,
    /// It is in the pool from the start (else it joins by an [`Event`]).
    pub(crate) at_start: bool,
}

/// A change to the decode pool during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The decode at this index of [`Topology::decodes`] joins the pool.
    Join(usize),
    /// The decode at this index is drained: it takes no new request, finishes what it holds.
    Drain(usize),
}

/// A [`Change`] at an emulated time from the run's start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Event {
    pub(crate) at_s: f64,
    pub(crate) change: Change,
}

/// What a scenario deploys and does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Topology {
    pub(crate) prefills: usize,
    pub(crate) decodes: Vec<DecodeSpec>,
    /// Proxies sharing one control, or SMG replicas.
    pub(crate) routers: usize,
    /// Sessions (closed-loop lanes) × this.
    pub(crate) sessions_scale: f64,
    /// In time order.
    pub(crate) events: Vec<Event>,
}

/// The run's shape the scenario's events are placed in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Window {
    /// Emulated seconds of warm-up, then the measured window up to `end_s`.
    pub(crate) warmup_s: f64,
    pub(crate) end_s: f64,
}

impl Window {
    /// The emulated time `fraction` of the way through the measured window.
    fn at(self, fraction: f64) -> f64 {
        self.warmup_s + fraction * (self.end_s - self.warmup_s)
    }
}

fn decode(i: usize, ranks: u32) -> DecodeSpec {
    DecodeSpec { name: format!("decode-{i}"), ranks, kv_tokens: None, at_start: true }
}

impl Scenario {
    /// As the flag spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::ScaleOut => "scale-out",
            Scenario::MixedDp => "mixed-dp",
            Scenario::KvPressure => "kv-pressure",
            Scenario::MultiProxy => "multi-proxy",
            Scenario::UnsaturatedPrefill => "unsaturated-prefill",
            Scenario::Classes => "classes",
        }
    }

    /// The deployment and its events: `ranks` per full decode, `kv_tokens` per rank under KV
    /// pressure.
    pub(crate) fn topology(self, ranks: u32, kv_tokens: u64, window: Window) -> Topology {
        let one = Topology {
            prefills: 1,
            decodes: vec![decode(0, ranks)],
            routers: 1,
            sessions_scale: 1.0,
            events: Vec::new(),
        };
        match self {
            Scenario::Steady => one,
            Scenario::ScaleOut => Topology {
                prefills: 2,
                decodes: vec![decode(0, ranks), DecodeSpec { at_start: false, ..decode(1, ranks) }],
                sessions_scale: 1.5,
                events: vec![
                    Event { at_s: window.at(0.15), change: Change::Join(1) },
                    Event { at_s: window.at(0.65), change: Change::Drain(0) },
                ],
                ..one
            },
            Scenario::MixedDp => Topology {
                prefills: 2,
                decodes: vec![decode(0, ranks), decode(1, (ranks / 2).max(1))],
                sessions_scale: 1.5,
                ..one
            },
            Scenario::KvPressure => Topology {
                decodes: vec![DecodeSpec { kv_tokens: Some(kv_tokens), ..decode(0, ranks) }],
                ..one
            },
            Scenario::MultiProxy => Topology { routers: 4, ..one },
            Scenario::UnsaturatedPrefill => Topology { prefills: 2, ..one },
            Scenario::Classes => Topology { prefills: 2, routers: 4, ..one },
        }
    }
}

impl Topology {
    /// GPUs the per-GPU rates divide by: `prefill_gpus` per prefill and one per decode rank,
    /// every decode counted (a joining one too: it is provisioned).
    pub(crate) fn gpus(&self, prefill_gpus: u32) -> u32 {
        prefill_gpus * self.prefills as u32 + self.decodes.iter().map(|d| d.ranks).sum::<u32>()
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let decodes: Vec<String> = self
            .decodes
            .iter()
            .map(|d| match d.kv_tokens {
                Some(kv) => format!("{} ({} ranks, {kv} KV tokens per rank)", d.name, d.ranks),
                None => format!("{} ({} ranks)", d.name, d.ranks),
            })
            .collect();
        write!(
            f,
            "{} prefill(s), decodes {}, {} router(s), sessions ×{}",
            self.prefills,
            decodes.join(" + "),
            self.routers,
            self.sessions_scale
        )?;
        for e in &self.events {
            let (what, i) = match e.change {
                Change::Join(i) => ("joins", i),
                Change::Drain(i) => ("is drained", i),
            };
            write!(f, "; {} {what} at {:.0} s", self.decodes[i].name, e.at_s)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scenario_deploys_what_its_table_says() {
        let w = Window { warmup_s: 400.0, end_s: 1_000.0 };
        let steady = Scenario::Steady.topology(8, 0, w);
        assert_eq!((steady.prefills, steady.decodes.len(), steady.routers), (1, 1, 1));
        assert_eq!(steady.gpus(4), 12, "the original study's 1P1D");
        let out = Scenario::ScaleOut.topology(8, 0, w);
        assert_eq!(out.gpus(4), 24);
        assert!(out.decodes[0].at_start && !out.decodes[1].at_start);
        assert_eq!(
            out.events,
            [Event { at_s: 490.0, change: Change::Join(1) }, Event { at_s: 790.0, change: Change::Drain(0) }]
        );
        assert_eq!(
            out.to_string(),
            "2 prefill(s), decodes decode-0 (8 ranks) + decode-1 (8 ranks), 1 router(s), sessions ×1.5; decode-1 joins at 490 s; decode-0 is drained at 790 s"
        );
        let mixed = Scenario::MixedDp.topology(8, 0, w);
        assert_eq!(mixed.decodes.iter().map(|d| d.ranks).collect::<Vec<_>>(), [8, 4]);
        assert_eq!(Scenario::KvPressure.topology(8, 2_400_000, w).decodes[0].kv_tokens, Some(2_400_000));
        assert_eq!(Scenario::MultiProxy.topology(8, 0, w).routers, 4);
        let unsaturated = Scenario::UnsaturatedPrefill.topology(8, 0, w);
        assert_eq!((unsaturated.prefills, unsaturated.decodes.len(), unsaturated.gpus(4)), (2, 1, 16));
        let classes = Scenario::Classes.topology(8, 0, w);
        assert_eq!((classes.prefills, classes.routers, classes.gpus(4)), (2, 4, 16));
    }
}

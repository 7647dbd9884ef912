//! The choice of one pick among the eligible candidates: which candidate, what the cost
//! suggests, whether they agree, and the session's previous target.

use std::time::Instant;

use infera_proto::types::{DecodeInputDemand, DecodePolicy, PickRequest, PrefillPolicy};
use rand::Rng;

use super::{PoolCursor, Scored, legacy, lowest};
use crate::affinity::Sessions;
use crate::settings::Settings;
use crate::target::TargetKey;

/// What a pick chose.
#[derive(Debug)]
pub struct Choice {
    /// Index of the chosen candidate.
    pub index: usize,
    /// Index of the cost's suggestion (when a cost was computed).
    pub suggested: Option<usize>,
    /// Shadow mode: whether the legacy choice is also a lowest-cost one.
    pub agree: Option<bool>,
    /// The session's previous prefill target, if it has one.
    pub affinity: Option<TargetKey>,
}

/// Decode choice: the legacy policy (off, shadow) or the lowest cost (on, and the shadow
/// suggestion).
pub fn choose_decode(
    settings: &Settings,
    candidates: &[Scored],
    pool: PoolCursor<'_>,
    rng: &mut impl Rng,
) -> Choice {
    let lowest =
        |rng: &mut _| lowest(candidates.iter().map(|c| c.cost), rng).expect("candidates are not empty");
    match settings.mode {
        DecodeInputDemand::On => {
            let (i, _) = lowest(rng);
            Choice { index: i, suggested: Some(i), agree: None, affinity: None }
        }
        DecodeInputDemand::Shadow => {
            let i = legacy(settings.policy, candidates, pool.cursor, pool.len, rng);
            let (s, min) = lowest(rng);
            // Among tied lowest costs the legacy choice is as good as any: suggest it then, so
            // "agree" and "suggested == chosen" say the same thing.
            let agree = candidates[i].cost == min;
            Choice {
                index: i,
                suggested: Some(if agree { i } else { s }),
                agree: Some(agree),
                affinity: None,
            }
        }
        DecodeInputDemand::Off => {
            let i = legacy(settings.policy, candidates, pool.cursor, pool.len, rng);
            Choice { index: i, suggested: None, agree: None, affinity: None }
        }
    }
}

/// Prefill choice: the least loaded (after the KV overlap credit), unless the session's previous
/// target is within the slack; or, with `--prefill-policy round-robin`, the next in turn.
pub fn choose_prefill(
    settings: &Settings,
    sessions: &Sessions,
    candidates: &[Scored],
    req: &PickRequest,
    pool: PoolCursor<'_>,
    now: Instant,
    rng: &mut impl Rng,
) -> Choice {
    let (low, min) = lowest(candidates.iter().map(|c| c.cost), rng).expect("candidates are not empty");
    if settings.prefill_policy == PrefillPolicy::RoundRobin {
        let i = legacy(DecodePolicy::RoundRobin, candidates, pool.cursor, pool.len, rng);
        return Choice { index: i, suggested: Some(low), agree: None, affinity: None };
    }
    let affinity = req.session.as_ref().and_then(|s| sessions.get(s, now, settings.session_ttl));
    let sticky = affinity
        .and_then(|k| candidates.iter().position(|c| c.candidate.key == k))
        .filter(|i| candidates[*i].cost <= min + settings.session_slack_tokens as f64);
    Choice { index: sticky.unwrap_or(low), suggested: Some(low), agree: None, affinity }
}

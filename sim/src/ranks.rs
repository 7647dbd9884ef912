//! Which DP rank a request runs on, as a pure function: SGLang's `DataParallelController`
//! (`python/sglang/srt/managers/data_parallel_controller.py` in SGLang 0.5.23: a
//! `routed_dp_rank` wins, else `bootstrap_room % N` under `follow_bootstrap_room`, else round
//! robin) and its PD range check.
//!
//! - `routed_dp_rank` (or `data_parallel_rank`, or `X-Data-Parallel-Rank`) pins the rank;
//!   out of range ⇒ 400 `routed_dp_rank=R out of range [0, N)` (with one rank, 0 is ignored).
//! - Otherwise `follow_bootstrap_room` takes `room % N`, and round robin takes the next rank.
//! - A prefill with several ranks under `follow_bootstrap_room`, pinned to a rank other than
//!   `room % N` and without `disagg_prefill_dp_rank` in its body, fails
//!   ("follow_bootstrap_room conflict").

use crate::disaggregation::DisaggregationMode;

/// How a request without `routed_dp_rank` gets its rank (`--load-balance-method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankChoice {
    /// In turn.
    RoundRobin,
    /// `bootstrap_room % ranks` (round robin without a room).
    FollowBootstrapRoom,
}

/// Why no rank could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RankError {
    /// The pinned rank does not exist.
    #[error("routed_dp_rank={rank} out of range [0, {ranks})")]
    OutOfRange {
        /// The rank asked for.
        rank: i64,
        /// The ranks there are.
        ranks: u32,
    },
    /// A prefill pinned to a rank that `follow_bootstrap_room` would not pick.
    #[error(
        "follow_bootstrap_room conflict: routed_dp_rank={rank} but bootstrap_room {room} % {ranks} = {expected}; \
         send disagg_prefill_dp_rank, route to rank {expected}, or launch the prefill with another \
         --load-balance-method"
    )]
    FollowConflict {
        /// The rank asked for.
        rank: u32,
        /// The bootstrap room that chose the rank.
        room: u64,
        /// The ranks there are.
        ranks: u32,
        /// `room % ranks`.
        expected: u32,
    },
}

/// What the choice depends on.
#[derive(Debug, Clone, Copy)]
pub struct RankRequest {
    /// `routed_dp_rank` (or an alias).
    pub routed: Option<i64>,
    /// `bootstrap_room`.
    pub room: Option<u64>,
    /// Whether the body carries `disagg_prefill_dp_rank`.
    pub has_disagg_prefill_rank: bool,
}

/// The rank for `req` on an engine with `ranks` ranks; `round_robin` yields the next counter.
pub fn choose(
    ranks: u32,
    mode: DisaggregationMode,
    choice: RankChoice,
    req: RankRequest,
    round_robin: impl FnOnce() -> u64,
) -> Result<u32, RankError> {
    let ranks = ranks.max(1);
    let follow = choice == RankChoice::FollowBootstrapRoom;
    if let Some(rank) = req.routed {
        let Some(rank) = u32::try_from(rank).ok().filter(|&r| r < ranks) else {
            return Err(RankError::OutOfRange { rank, ranks });
        };
        if let Some(room) = req.room
            && mode == DisaggregationMode::Prefill
            && follow
            && ranks > 1
            && !req.has_disagg_prefill_rank
        {
            let expected = (room % u64::from(ranks)) as u32;
            if rank != expected {
                return Err(RankError::FollowConflict { rank, room, ranks, expected });
            }
        }
        return Ok(rank);
    }
    match req.room {
        Some(room) if follow => Ok((room % u64::from(ranks)) as u32),
        _ => Ok((round_robin() % u64::from(ranks)) as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RR: RankChoice = RankChoice::RoundRobin;
    const FOLLOW: RankChoice = RankChoice::FollowBootstrapRoom;

    fn req(routed: Option<i64>, room: Option<u64>) -> RankRequest {
        RankRequest { routed, room, has_disagg_prefill_rank: false }
    }

    #[test]
    fn a_pinned_rank_is_used_or_rejected() {
        let n = DisaggregationMode::Null;
        assert_eq!(choose(4, n, RR, req(Some(3), None), || 0), Ok(3));
        let err = choose(4, n, RR, req(Some(4), None), || 0).unwrap_err();
        assert_eq!(err.to_string(), "routed_dp_rank=4 out of range [0, 4)");
        assert!(choose(4, n, RR, req(Some(-1), None), || 0).is_err());
        assert_eq!(choose(1, n, RR, req(Some(0), None), || 0), Ok(0));
    }

    #[test]
    fn unpinned_requests_follow_the_room_or_take_turns() {
        let p = DisaggregationMode::Prefill;
        assert_eq!(choose(4, p, FOLLOW, req(None, Some(10)), || 0), Ok(2));
        assert_eq!(choose(4, p, FOLLOW, req(None, None), || 7), Ok(3));
        assert_eq!(choose(4, DisaggregationMode::Decode, RR, req(None, Some(10)), || 5), Ok(1));
    }

    #[test]
    fn a_prefill_pinned_against_the_room_fails_without_disagg_prefill_dp_rank() {
        let p = DisaggregationMode::Prefill;
        assert!(matches!(
            choose(4, p, FOLLOW, req(Some(1), Some(10)), || 0),
            Err(RankError::FollowConflict { expected: 2, .. })
        ));
        assert_eq!(choose(4, p, FOLLOW, req(Some(2), Some(10)), || 0), Ok(2));
        let with = RankRequest { has_disagg_prefill_rank: true, ..req(Some(1), Some(10)) };
        assert_eq!(choose(4, p, FOLLOW, with, || 0), Ok(1));
        assert_eq!(choose(4, p, RR, req(Some(1), Some(10)), || 0), Ok(1));
    }
}

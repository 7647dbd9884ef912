//! Pick RPC latency of a standalone control against the leader of the replica set: one client
//! per side on its own connection, under a lease of its own, loops `PickDecode` then `Release`
//! of the booked reservation, one call at a time; only the `PickDecode` call is timed. After a
//! warm-up on each, rounds alternate the two sides so drift on a shared machine hits both.

use std::time::{Duration, Instant};

use infera_proto::pb::{self, router_client::RouterClient};
use tonic::transport::Channel;

use super::deploy::MODEL;
use crate::replay::percentile::percentile;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Untimed picks per side first.
    pub(crate) warmup: usize,
    /// Timed picks per side, over all rounds.
    pub(crate) picks: usize,
    /// Alternating rounds per side.
    pub(crate) rounds: usize,
}

/// One side's picks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Latency {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
}

/// One side: a Router client and its lease.
struct Side {
    router: RouterClient<Channel>,
    lease: String,
    samples: Vec<Duration>,
    n: u64,
}

impl Side {
    async fn open(url: &str, holder: &str) -> anyhow::Result<Self> {
        let channel = Channel::from_shared(url.to_owned())?.connect().await?;
        let mut router = RouterClient::new(channel);
        let req = pb::OpenLeaseRequest { holder: holder.to_owned(), ttl_ms: 300_000 };
        let lease = router.open_lease(req).await?.into_inner().lease_id;
        Ok(Self { router, lease, samples: Vec::new(), n: 0 })
    }

    /// `n` picks, each released; timed when `keep`.
    async fn run(&mut self, n: usize, keep: bool) -> anyhow::Result<()> {
        for _ in 0..n {
            self.n += 1;
            let req = pb::PickRequest {
                lease_id: self.lease.clone(),
                request_id: format!("bench-pick-{}", self.n),
                model: MODEL.to_owned(),
                input_tokens: 4096,
                ..Default::default()
            };
            let t0 = Instant::now();
            let picked = self.router.pick_decode(req).await?.into_inner();
            let took = t0.elapsed();
            let release = pb::ReleaseRequest {
                reservation_id: picked.reservation_id,
                reason: pb::ReleaseReason::Eof as i32,
                failure: 0,
            };
            self.router.release(release).await?;
            if keep {
                self.samples.push(took);
            }
        }
        Ok(())
    }

    async fn close(mut self) -> anyhow::Result<Latency> {
        self.router.close_lease(pb::CloseLeaseRequest { lease_id: self.lease.clone() }).await?;
        let us: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        let at = |p| percentile(&us, p).unwrap_or(f64::NAN);
        Ok(Latency { p50_us: at(50.0), p99_us: at(99.0) })
    }
}

/// The latency of the standalone control at `standalone` and of the leader at `leader` (gRPC URLs).
pub(crate) async fn compare(
    standalone: &str,
    leader: &str,
    plan: Plan,
) -> anyhow::Result<(Latency, Latency)> {
    let mut one = Side::open(standalone, "bench-pick-latency-standalone").await?;
    let mut set = Side::open(leader, "bench-pick-latency-leader").await?;
    one.run(plan.warmup, false).await?;
    set.run(plan.warmup, false).await?;
    let rounds = plan.rounds.max(1);
    let per_round = plan.picks.div_ceil(rounds);
    for _ in 0..rounds {
        one.run(per_round, true).await?;
        set.run(per_round, true).await?;
    }
    Ok((one.close().await?, set.close().await?))
}

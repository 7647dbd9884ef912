//! The batched round: what `PickMany` + `ReleaseMany` (the proxy's pick queue and release
//! outbox) give control against the same picks one RPC each. Each client asks `BATCH` decode
//! picks and releases them, either as `BATCH` × (PickDecode + Release) or as one PickMany and one
//! ReleaseMany; rounds alternate, and the report is in picks per second.

use std::time::Duration;

use infera_proto::pb::{self, pick_result::Outcome, router_client::RouterClient};
use tonic::transport::Channel;

use super::{ControlArgs, Served, decode_pick, measure, median};

/// Picks per batch: about what the proxy's queue gathers at 64 streams.
pub(super) const BATCH: usize = 16;

/// Median picks per second, one RPC each and batched.
pub(super) struct Batched {
    pub(super) unary: f64,
    pub(super) batched: f64,
    /// Per round: batched / unary.
    pub(super) ratios: Vec<f64>,
}

fn pick(lease: &str, i: usize) -> pb::PickRequest {
    decode_pick(lease.to_owned(), format!("bench-batch-{i}"))
}

fn release(reservation_id: String) -> pb::ReleaseRequest {
    pb::ReleaseRequest { reservation_id, reason: pb::ReleaseReason::Eof as i32, failure: 0 }
}

async fn one_by_one(
    mut c: RouterClient<Channel>,
    lease: String,
) -> Result<RouterClient<Channel>, tonic::Status> {
    let mut held = Vec::with_capacity(BATCH);
    for i in 0..BATCH {
        held.push(c.pick_decode(pick(&lease, i)).await?.into_inner().reservation_id);
    }
    for id in held {
        c.release(release(id)).await?;
    }
    Ok(c)
}

async fn batched(
    mut c: RouterClient<Channel>,
    lease: String,
) -> Result<RouterClient<Channel>, tonic::Status> {
    let picks = (0..BATCH)
        .map(|i| pb::PickItem {
            kind: pb::PickKind::Decode as i32,
            pick: Some(pick(&lease, i)),
            trace_context: Default::default(),
        })
        .collect();
    let results = c.pick_many(pb::PickManyRequest { picks }).await?.into_inner().results;
    let mut releases = Vec::with_capacity(results.len());
    for result in results {
        match result.outcome {
            Some(Outcome::Picked(p)) => releases.push(release(p.reservation_id)),
            other => return Err(tonic::Status::internal(format!("a batched pick failed: {other:?}"))),
        }
    }
    c.release_many(pb::ReleaseManyRequest { releases }).await?;
    Ok(c)
}

/// Alternating rounds of both, on the clients of `served`.
pub(super) async fn round_trips(args: &ControlArgs, served: &Served) -> anyhow::Result<Batched> {
    let round = Duration::from_millis(args.round_ms);
    let lease = served.lease.clone();
    let unary = move |c| one_by_one(c, lease.clone());
    let lease = served.lease.clone();
    let batch = move |c| batched(c, lease.clone());
    measure(&served.routers, round / 4, unary.clone()).await?;
    measure(&served.routers, round / 4, batch.clone()).await?;
    let (mut unary_rates, mut batched_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let u = measure(&served.routers, round, unary.clone()).await? * BATCH as f64;
        let b = measure(&served.routers, round, batch.clone()).await? * BATCH as f64;
        unary_rates.push(u);
        batched_rates.push(b);
        ratios.push(b / u);
    }
    Ok(Batched { unary: median(unary_rates), batched: median(batched_rates), ratios })
}

//! Re-declaring: the legs in flight that are not booked under the lease held now go to its
//! control in one `Redeclare` (after every new lease, even with none: that is how a new leader
//! knows this proxy is back), and each answer replaces the leg's old booking. A leg that ended
//! while the call was out has its new reservation released at once.

use std::time::{Duration, Instant};

use infera_proto::convert;
use infera_proto::pb;
use infera_proto::types::{MAX_DECLARED_LEGS, ReleaseReason};
use tonic::Status;

use super::controls::Controls;
use super::lease::Held;
use super::release::{Booking, Releaser};
use crate::metrics::ProxyMetrics;

/// The longest one `Redeclare` is waited for.
const REDECLARE_TIMEOUT: Duration = Duration::from_secs(2);

/// Re-declares what is not booked under `held` (with `always`, calls even when nothing is).
pub(super) async fn redeclare(
    releaser: &Releaser,
    controls: &Controls,
    metrics: &ProxyMetrics,
    held: Held,
    always: bool,
) -> Result<(), Status> {
    let todo = releaser.legs.undeclared(held.lease, Instant::now());
    if todo.is_empty() && !always {
        return Ok(());
    }
    let chunks: Vec<_> =
        if todo.is_empty() { vec![&todo[..]] } else { todo.chunks(MAX_DECLARED_LEGS).collect() };
    for chunk in chunks {
        let req = pb::RedeclareRequest {
            lease_id: held.lease.to_string(),
            legs: chunk.iter().map(|u| (&u.leg).into()).collect(),
        };
        let mut client = controls.client(held.at);
        let call = client.redeclare(req);
        let resp = tokio::time::timeout(REDECLARE_TIMEOUT, call)
            .await
            .map_err(|_| Status::deadline_exceeded("Redeclare timed out"))??
            .into_inner();
        if resp.results.len() != chunk.len() {
            return Err(Status::internal(format!(
                "control answered {} results for {} legs",
                resp.results.len(),
                chunk.len()
            )));
        }
        let (mut booked, mut unknown) = (0, 0);
        for (leg, result) in chunk.iter().zip(resp.results) {
            if result.unknown_target || result.reservation_id.is_empty() {
                // Left as it is: declared again at the next renewal.
                unknown += 1;
                continue;
            }
            let reservation = convert::reservation_id("reservation_id", &result.reservation_id)
                .map_err(|e| Status::internal(format!("control answered Redeclare with {e}")))?;
            booked += 1;
            if let Err(orphan) = releaser.legs.settle(leg, reservation, held.lease) {
                releaser.release_booking(
                    Booking { reservation: orphan, lease: held.lease },
                    ReleaseReason::Cancelled,
                    None,
                );
            }
        }
        metrics.redeclared(booked, unknown);
        if !chunk.is_empty() {
            tracing::info!(lease = %held.lease, booked, unknown, "legs re-declared to control");
        }
    }
    Ok(())
}

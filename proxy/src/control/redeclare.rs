//! Re-declaring: the legs in flight that are not booked under the lease held now go to its
//! control in one `Redeclare` (after every new lease, even with none: that is how a new leader
//! knows this proxy is back), and each answer replaces the leg's old booking. A leg that ended
//! while the call was out has its new reservation released at once. Many legs go out in several
//! calls, each at most [`REDECLARE_CHUNK_BYTES`] encoded (control refuses a larger one) and
//! [`MAX_DECLARED_LEGS`] legs.

use std::ops::Range;
use std::time::{Duration, Instant};

use infera_proto::convert;
use infera_proto::pb;
use infera_proto::types::{MAX_DECLARED_LEGS, REDECLARE_CHUNK_BYTES, Release, ReleaseReason};
use prost::Message as _;
use tonic::Status;

use super::controls::Controls;
use super::lease::Held;
use super::release::Releaser;
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
    let mut wire: Vec<pb::DeclaredLeg> = todo.iter().map(|u| (&u.leg).into()).collect();
    for range in chunks(&wire, REDECLARE_CHUNK_BYTES, MAX_DECLARED_LEGS) {
        let chunk = &todo[range.clone()];
        let legs = wire[range].iter_mut().map(std::mem::take).collect();
        let req = pb::RedeclareRequest { lease_id: held.lease.to_string(), legs };
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
        let (mut booked, mut unknown, mut full) = (0, 0, 0);
        for (leg, result) in chunk.iter().zip(resp.results) {
            if result.over_capacity {
                // Left as it is: declared again at the next renewal.
                full += 1;
                continue;
            }
            if result.unknown_target || result.reservation_id.is_empty() {
                unknown += 1;
                continue;
            }
            let reservation = convert::reservation_id("reservation_id", &result.reservation_id)
                .map_err(|e| Status::internal(format!("control answered Redeclare with {e}")))?;
            booked += 1;
            if let Err(orphan) = releaser.legs.settle(leg, reservation, held.lease) {
                releaser.release_reservation(held.lease, Release::new(orphan, ReleaseReason::Cancelled));
            }
        }
        metrics.redeclared(booked, unknown, full);
        if !chunk.is_empty() {
            tracing::info!(lease = %held.lease, booked, unknown, over_capacity = full, "legs re-declared to control");
        }
    }
    Ok(())
}

/// `legs` cut in runs of at most `max_bytes` encoded and `max_legs` legs each, in order; one
/// empty run for no legs (the call that tells a new leader the proxy is back). A leg larger than
/// `max_bytes` alone goes in a run of its own (no real leg is: its strings are names).
fn chunks(legs: &[pb::DeclaredLeg], max_bytes: usize, max_legs: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, leg) in legs.iter().enumerate() {
        // The field's tag and length prefix, then the leg.
        let len = leg.encoded_len();
        let size = 1 + prost::length_delimiter_len(len) + len;
        if i > start && (bytes + size > max_bytes || i - start == max_legs) {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    out.push(start..legs.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg(request: &str) -> pb::DeclaredLeg {
        pb::DeclaredLeg {
            kind: pb::PickKind::Decode as i32,
            target: Some(pb::Target { worker_id: "decode-0".into(), dp_rank: 3 }),
            model: "glm-5.2".into(),
            request_id: request.into(),
            input_tokens: 12_345,
            age_ms: 6_789,
            previous_reservation_id: "r-0000abcd-42-0123456789abcdef".into(),
        }
    }

    #[test]
    fn legs_go_out_in_calls_that_each_fit_the_bounds() {
        assert_eq!(chunks(&[], 1_000, 10), vec![0..0], "no legs: one empty call");
        let legs: Vec<pb::DeclaredLeg> = (0..1_000).map(|i| leg(&format!("req-{i:06}"))).collect();
        let each = legs[0].encoded_len() + 2;
        for (max_bytes, max_legs) in
            [(10 * each, 1_000), (10 * each + each / 2, 1_000), (1 << 20, 7), (each, 1_000)]
        {
            let runs = chunks(&legs, max_bytes, max_legs);
            assert_eq!(runs.first().unwrap().start, 0);
            assert_eq!(runs.last().unwrap().end, legs.len());
            for pair in runs.windows(2) {
                assert_eq!(pair[0].end, pair[1].start, "in order, none left out");
            }
            for r in &runs {
                let req = pb::RedeclareRequest {
                    lease_id: "l-0000abcd-1-0123456789abcdef".into(),
                    legs: legs[r.clone()].to_vec(),
                };
                assert!(req.legs.len() <= max_legs);
                assert!(req.encoded_len() <= max_bytes + 40, "{} > {max_bytes}", req.encoded_len());
            }
        }
        assert_eq!(chunks(&legs, 10 * each, 1_000).len(), 100);
        // The real bound: a proxy with 65,536 legs in flight sends calls control takes.
        let many: Vec<pb::DeclaredLeg> = (0..65_536).map(|i| leg(&format!("req-{i:06}"))).collect();
        for r in chunks(&many, REDECLARE_CHUNK_BYTES, MAX_DECLARED_LEGS) {
            let bytes: usize = many[r].iter().map(|l| l.encoded_len() + 2).sum();
            assert!(bytes <= REDECLARE_CHUNK_BYTES);
        }
    }
}

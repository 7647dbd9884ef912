//! Every refusal carries its reason over the wire: a `google.rpc.ErrorInfo` detail that callers
//! decode into `infera_proto::error::ErrorReason`, and the `infera-error` metadata operators read.

use infera_proto::error::{ERROR_REASON_METADATA, ErrorReason, StatusReason};
use infera_proto::pb;

use crate::harness::*;

#[tokio::test]
async fn refusals_carry_their_reason_as_a_typed_detail_and_as_metadata() {
    let control = Control::start(&pd_workers(2), &[]).await;
    let lease = control.lease(0).await;
    let mut router = control.router().await;
    let never_issued = "r-00000001-999999999".to_owned();
    let release = pb::ReleaseRequest {
        reservation_id: never_issued,
        reason: pb::ReleaseReason::Eof as i32,
        failure: 0,
    };
    let cases = [
        (router.pick_decode(pick(&lease, "nope", 1)).await.unwrap_err(), ErrorReason::UnknownModel),
        (router.pick_decode(pick("", "m", 1)).await.unwrap_err(), ErrorReason::InvalidArgument),
        (
            router
                .keep_alive(pb::KeepAliveRequest { lease_id: "l-00000001-999999999".into() })
                .await
                .unwrap_err(),
            ErrorReason::UnknownLease,
        ),
        (router.release(release).await.unwrap_err(), ErrorReason::UnknownReservation),
    ];
    for (status, reason) in cases {
        assert_eq!(StatusReason::of(&status), StatusReason::Known(reason), "{status:?}");
        assert_eq!(status.code(), reason.code(), "{status:?}");
        let metadata = status.metadata().get(ERROR_REASON_METADATA).and_then(|v| v.to_str().ok());
        assert_eq!(metadata, Some(reason.as_str()), "{status:?}");
    }
}

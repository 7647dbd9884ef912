//! Control's error vocabulary on the gRPC boundary: one [`ErrorReason`] per way a call can be
//! refused, with its gRPC code. Control builds the `Status` of every error from it
//! ([`ErrorReason::status`]); callers decode it back ([`StatusReason::of`]) and branch on the enum,
//! never on the message text.
//!
//! A status carries the reason twice: as a `google.rpc.ErrorInfo` detail (reason
//! `UNKNOWN_LEASE`, domain [`DOMAIN`]), which is what callers decode, and as the trailing metadata
//! `infera-error: unknown_lease` ([`ERROR_REASON_METADATA`]), which operators read with
//! `grpcurl -v`. `manual/reference/grpc.md` lists both.

use std::collections::HashMap;
use std::fmt;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of control's reasons: the gRPC package that defines them.
pub const DOMAIN: &str = "infera.control.v1";

/// gRPC metadata key of control's error statuses carrying the reason in snake case
/// ([`ErrorReason::as_str`]), for operators reading trailers.
pub const ERROR_REASON_METADATA: &str = "infera-error";

/// gRPC metadata key of a `NOT_LEADER` status naming the leader's URL.
pub const LEADER_METADATA: &str = "infera-leader";
/// The `ErrorInfo.metadata` key of the same URL.
const LEADER_INFO_KEY: &str = "leader";

/// Why control refused a call.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ErrorReason {
    /// A field that does not make a domain value; the message names it.
    InvalidArgument,
    /// No worker serves the model.
    UnknownModel,
    /// The model has workers, but none for this kind of pick.
    NoPool,
    /// Every target the pick could use is drained.
    NoEligibleTarget,
    /// A lease control does not hold (never opened, expired, closed, or an earlier instance's).
    UnknownLease,
    /// A reservation id control never issued.
    UnknownReservation,
    /// No such worker.
    UnknownWorker,
    /// No such rank on a known worker.
    UnknownTarget,
    /// A decode request weight above 0 while the demand mode does not score.
    WeightNeedsDemand,
    /// An Admin call without the right bearer token, or a Router call without a credential
    /// control accepts (a client certificate or a proxy token).
    Unauthenticated,
    /// This control does not lead its replica set (or its leadership lapsed): it books nothing.
    /// The status names the leader when one is known ([`LEADER_METADATA`]).
    NotLeader,
    /// Every candidate of the pool is at its rank's cap: retry later.
    AtCapacity,
    /// The model has prefill and decode workers, but no prefill and decode that can pair (their
    /// KV page size, transfer backend or KV cache dtype differ): no pick is made for it.
    NoCompatiblePair,
    /// The caller's identity holds as many open leases as it may (`--max-leases-per-identity`).
    TooManyLeases,
    /// A `Redeclare` larger than control takes in one call (`--max-redeclare-bytes`): send the
    /// legs in smaller calls.
    RedeclareTooLarge,
    /// The leader's advertised URL is plain `http://` while this link uses TLS: it is not
    /// followed, so that nothing sent over TLS (a token, a ledger) goes out in clear.
    PlaintextLeader,
    /// The call needs the worker registry (etcd), and control runs without one (`--etcd`).
    NoRegistry,
    /// The worker registry (etcd) did not take a write the call needs: try again.
    RegistryUnavailable,
    /// A pick names a service class control's class file does not define.
    UnknownServiceClass,
    /// Fleet admission has no room for the pick now (or others wait before it): call again as a
    /// unary `PickDecode` with `wait_admission` to wait in control's queue.
    AdmissionQueued,
    /// The pick waited in the admission queue until its class's TTFT target could no longer be
    /// met: the client is told to come back later.
    AdmissionShed,
}

impl ErrorReason {
    /// Every reason.
    pub const ALL: [Self; 21] = [
        Self::InvalidArgument,
        Self::UnknownModel,
        Self::NoPool,
        Self::NoEligibleTarget,
        Self::UnknownLease,
        Self::UnknownReservation,
        Self::UnknownWorker,
        Self::UnknownTarget,
        Self::WeightNeedsDemand,
        Self::Unauthenticated,
        Self::NotLeader,
        Self::AtCapacity,
        Self::NoCompatiblePair,
        Self::TooManyLeases,
        Self::RedeclareTooLarge,
        Self::PlaintextLeader,
        Self::NoRegistry,
        Self::RegistryUnavailable,
        Self::UnknownServiceClass,
        Self::AdmissionQueued,
        Self::AdmissionShed,
    ];

    /// The snake-case spelling: the `outcome` label of control's pick metrics and the
    /// `infera-error` metadata value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::UnknownModel => "unknown_model",
            Self::NoPool => "no_pool",
            Self::NoEligibleTarget => "no_eligible_target",
            Self::UnknownLease => "unknown_lease",
            Self::UnknownReservation => "unknown_reservation",
            Self::UnknownWorker => "unknown_worker",
            Self::UnknownTarget => "unknown_target",
            Self::WeightNeedsDemand => "weight_needs_demand",
            Self::Unauthenticated => "unauthenticated",
            Self::NotLeader => "not_leader",
            Self::AtCapacity => "at_capacity",
            Self::NoCompatiblePair => "no_compatible_pair",
            Self::TooManyLeases => "too_many_leases",
            Self::RedeclareTooLarge => "redeclare_too_large",
            Self::PlaintextLeader => "plaintext_leader",
            Self::NoRegistry => "no_registry",
            Self::RegistryUnavailable => "registry_unavailable",
            Self::UnknownServiceClass => "unknown_service_class",
            Self::AdmissionQueued => "admission_queued",
            Self::AdmissionShed => "admission_shed",
        }
    }

    /// The `ErrorInfo.reason` spelling (`UNKNOWN_LEASE`), as `google.rpc.ErrorInfo` asks for
    /// (`[A-Z0-9_]+`).
    pub fn error_info_reason(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::UnknownModel => "UNKNOWN_MODEL",
            Self::NoPool => "NO_POOL",
            Self::NoEligibleTarget => "NO_ELIGIBLE_TARGET",
            Self::UnknownLease => "UNKNOWN_LEASE",
            Self::UnknownReservation => "UNKNOWN_RESERVATION",
            Self::UnknownWorker => "UNKNOWN_WORKER",
            Self::UnknownTarget => "UNKNOWN_TARGET",
            Self::WeightNeedsDemand => "WEIGHT_NEEDS_DEMAND",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::NotLeader => "NOT_LEADER",
            Self::AtCapacity => "AT_CAPACITY",
            Self::NoCompatiblePair => "NO_COMPATIBLE_PAIR",
            Self::TooManyLeases => "TOO_MANY_LEASES",
            Self::RedeclareTooLarge => "REDECLARE_TOO_LARGE",
            Self::PlaintextLeader => "PLAINTEXT_LEADER",
            Self::NoRegistry => "NO_REGISTRY",
            Self::RegistryUnavailable => "REGISTRY_UNAVAILABLE",
            Self::UnknownServiceClass => "UNKNOWN_SERVICE_CLASS",
            Self::AdmissionQueued => "ADMISSION_QUEUED",
            Self::AdmissionShed => "ADMISSION_SHED",
        }
    }

    /// The reason whose `ErrorInfo.reason` is `reason`.
    pub fn from_error_info_reason(reason: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.error_info_reason() == reason)
    }

    /// The gRPC code of a status with this reason; the only place codes are chosen.
    pub fn code(self) -> Code {
        match self {
            Self::InvalidArgument | Self::UnknownServiceClass => Code::InvalidArgument,
            Self::UnknownModel
            | Self::UnknownLease
            | Self::UnknownReservation
            | Self::UnknownWorker
            | Self::UnknownTarget => Code::NotFound,
            Self::NoPool | Self::WeightNeedsDemand | Self::NoCompatiblePair | Self::NoRegistry => {
                Code::FailedPrecondition
            }
            Self::NoEligibleTarget | Self::NotLeader | Self::PlaintextLeader | Self::RegistryUnavailable => {
                Code::Unavailable
            }
            Self::Unauthenticated => Code::Unauthenticated,
            Self::AtCapacity
            | Self::TooManyLeases
            | Self::RedeclareTooLarge
            | Self::AdmissionQueued
            | Self::AdmissionShed => Code::ResourceExhausted,
        }
    }

    /// The status control answers with: this reason's code, `message` for people, the reason as an
    /// `ErrorInfo` detail and as `infera-error` metadata.
    pub fn status(self, message: impl Into<String>) -> Status {
        self.status_naming(message, None)
    }

    /// [`ErrorReason::status`], naming the leader's URL when `leader` is given: as the
    /// `ErrorInfo` metadata entry `leader` (what callers decode, [`StatusReason::leader`]) and as
    /// the `infera-leader` metadata.
    pub fn status_naming(self, message: impl Into<String>, leader: Option<&str>) -> Status {
        let mut metadata = MetadataMap::new();
        metadata.insert(ERROR_REASON_METADATA, MetadataValue::from_static(self.as_str()));
        let mut info = HashMap::new();
        if let Some(url) = leader
            && let Ok(value) = MetadataValue::try_from(url)
        {
            metadata.insert(LEADER_METADATA, value);
            info.insert(LEADER_INFO_KEY.to_owned(), url.to_owned());
        }
        let details = ErrorDetails::with_error_info(self.error_info_reason(), DOMAIN, info);
        Status::with_error_details_and_metadata(self.code(), message, details, metadata)
    }
}

impl fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a status says about why control refused, decoded from its `ErrorInfo` detail.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum StatusReason {
    /// One of control's reasons.
    Known(ErrorReason),
    /// An `ErrorInfo` of control's domain with a reason this build does not know (a newer
    /// control): the caller treats it like any other failure.
    Unknown(String),
    /// No `ErrorInfo` of control's domain: a transport error, a deadline, another server.
    Absent,
}

impl StatusReason {
    /// Decodes the reason of `status`.
    pub fn of(status: &Status) -> Self {
        match status.get_details_error_info() {
            Some(info) if info.domain == DOMAIN => match ErrorReason::from_error_info_reason(&info.reason) {
                Some(reason) => Self::Known(reason),
                None => Self::Unknown(info.reason),
            },
            _ => Self::Absent,
        }
    }

    /// The leader a `NOT_LEADER` status names, if any.
    pub fn leader(status: &Status) -> Option<String> {
        let info = status.get_details_error_info()?;
        (info.domain == DOMAIN).then_some(())?;
        info.metadata.get(LEADER_INFO_KEY).filter(|u| !u.is_empty()).cloned()
    }

    /// The known reason, if any.
    pub fn known(&self) -> Option<ErrorReason> {
        match self {
            Self::Known(r) => Some(*r),
            Self::Unknown(_) | Self::Absent => None,
        }
    }
}

/// A status as one result of a `PickMany` carries it: its code, its message and its details
/// (the ErrorInfo with the reason). [`status_of_failure`] rebuilds it.
pub fn failure_of_status(status: &Status) -> crate::pb::PickFailure {
    crate::pb::PickFailure {
        code: status.code() as i32,
        message: status.message().to_owned(),
        details: status.details().to_vec(),
    }
}

/// The status a `PickMany` result carries, as the failed unary call would have ended with it:
/// [`StatusReason::of`] reads its reason.
pub fn status_of_failure(failure: crate::pb::PickFailure) -> Status {
    Status::with_details(Code::from(failure.code), failure.message, failure.details.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_through_a_status() {
        for reason in ErrorReason::ALL {
            let status = reason.status("why");
            assert_eq!(status.code(), reason.code());
            assert_eq!(status.message(), "why");
            assert_eq!(StatusReason::of(&status), StatusReason::Known(reason), "{reason}");
            let meta = status.metadata().get(ERROR_REASON_METADATA).and_then(|v| v.to_str().ok());
            assert_eq!(meta, Some(reason.as_str()));
            // The details travel as the `grpc-status-details-bin` trailer: rebuild from it.
            let wire =
                Status::with_details(status.code(), status.message(), status.details().to_vec().into());
            assert_eq!(StatusReason::of(&wire).known(), Some(reason));
        }
    }

    #[test]
    fn a_pick_failure_carries_the_reason_and_the_leader_of_its_status() {
        let status = ErrorReason::NotLeader.status_naming("not the leader", Some("http://10.0.0.2:50051"));
        let back = status_of_failure(failure_of_status(&status));
        assert_eq!((back.code(), back.message()), (Code::Unavailable, "not the leader"));
        assert_eq!(StatusReason::of(&back).known(), Some(ErrorReason::NotLeader));
        assert_eq!(StatusReason::leader(&back).as_deref(), Some("http://10.0.0.2:50051"));
        let plain = status_of_failure(failure_of_status(&Status::internal("boom")));
        assert_eq!((plain.code(), StatusReason::of(&plain)), (Code::Internal, StatusReason::Absent));
    }

    #[test]
    fn spellings_are_distinct_and_well_formed() {
        let mut snake: Vec<_> = ErrorReason::ALL.iter().map(|r| r.as_str()).collect();
        snake.sort_unstable();
        snake.dedup();
        assert_eq!(snake.len(), ErrorReason::ALL.len());
        for r in ErrorReason::ALL {
            assert_eq!(r.error_info_reason(), r.as_str().to_ascii_uppercase());
            assert!(r.error_info_reason().bytes().all(|b| b.is_ascii_uppercase() || b == b'_'));
        }
    }

    #[test]
    fn a_not_leader_status_names_the_leader_in_its_detail_and_its_metadata() {
        let status = ErrorReason::NotLeader.status_naming("not the leader", Some("http://10.0.0.2:50051"));
        assert_eq!(status.code(), Code::Unavailable);
        let meta = status.metadata().get(LEADER_METADATA).and_then(|v| v.to_str().ok());
        assert_eq!(meta, Some("http://10.0.0.2:50051"));
        let wire = Status::with_details(status.code(), status.message(), status.details().to_vec().into());
        assert_eq!(StatusReason::of(&wire).known(), Some(ErrorReason::NotLeader));
        assert_eq!(StatusReason::leader(&wire).as_deref(), Some("http://10.0.0.2:50051"));
        assert_eq!(StatusReason::leader(&ErrorReason::NotLeader.status("no leader yet")), None);
        assert_eq!(StatusReason::leader(&Status::unavailable("connection refused")), None);
    }

    #[test]
    fn unknown_or_foreign_reasons_decode_without_panicking() {
        let details = ErrorDetails::with_error_info("SOMETHING_NEW", DOMAIN, HashMap::new());
        let status = Status::with_error_details(Code::Internal, "new", details);
        assert_eq!(StatusReason::of(&status), StatusReason::Unknown("SOMETHING_NEW".into()));
        assert_eq!(StatusReason::of(&status).known(), None);
        let foreign = ErrorDetails::with_error_info("UNKNOWN_LEASE", "example.com", HashMap::new());
        let status = Status::with_error_details(Code::NotFound, "other", foreign);
        assert_eq!(StatusReason::of(&status), StatusReason::Absent);
        assert_eq!(StatusReason::of(&Status::unavailable("connection refused")), StatusReason::Absent);
        let garbage = Status::with_details(Code::Internal, "x", bytes_of(&[0xff, 0x01]));
        assert_eq!(StatusReason::of(&garbage), StatusReason::Absent);
    }

    fn bytes_of(b: &[u8]) -> tonic::codegen::Bytes {
        tonic::codegen::Bytes::copy_from_slice(b)
    }
}

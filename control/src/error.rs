//! Control's errors, and the one mapping of them to the wire's [`ErrorReason`] (which chooses the
//! gRPC code and rides on the status as a typed detail).

use infera_proto::convert::ConvertError;
use infera_proto::error::ErrorReason;
use infera_proto::types::{LeaseId, ModelName, PickKind, ReservationId, Target, WeightNeedsDemand, WorkerId};
use tonic::{Code, Status};

use crate::identity::Identity;

/// Everything a control call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A wire value that does not make a domain value.
    #[error("invalid argument: {0}")]
    InvalidArgument(#[from] ConvertError),
    /// No worker serves this model.
    #[error("unknown model \"{0}\"")]
    UnknownModel(ModelName),
    /// The model has workers, but none for this kind of pick.
    #[error("model \"{model}\" has no {} workers{}", pool_name(*.kind), pool_hint(*.kind))]
    NoPool {
        /// The model the pick was for.
        model: ModelName,
        /// The pick asked for.
        kind: PickKind,
    },
    /// The model has prefill and decode workers, but none of them can pair.
    #[error(
        "model \"{model}\" has no prefill and decode that can pair (KV page size, transfer backend and KV cache dtype must agree): {why}; Admin/ListTargets shows each worker's unpaired_reason"
    )]
    NoCompatiblePair {
        /// The model the pick was for.
        model: ModelName,
        /// What its prefills and decodes run.
        why: String,
    },
    /// Every target of the pool is drained.
    #[error("no eligible {} target for model \"{model}\": all are drained", kind.as_str())]
    NoEligibleTarget {
        /// The model the pick was for.
        model: ModelName,
        /// The pick asked for.
        kind: PickKind,
    },
    /// A lease this control does not hold (never opened, expired or closed).
    #[error("unknown lease {0} (expired, closed, or opened by an earlier control instance); open a new one")]
    UnknownLease(LeaseId),
    /// A reservation id this control never issued.
    #[error("unknown reservation {0}")]
    UnknownReservation(ReservationId),
    /// A live lease of another identity: answered exactly as an unknown one, so that a caller
    /// learns nothing of others' leases (counted apart, `infera_router_foreign_ids_total`).
    #[error("unknown lease {0} (expired, closed, or opened by an earlier control instance); open a new one")]
    ForeignLease(LeaseId),
    /// A live reservation of another identity: answered exactly as an unknown one.
    #[error("unknown reservation {0}")]
    ForeignReservation(ReservationId),
    /// The caller's identity holds as many leases as it may.
    #[error(
        "identity {identity} holds {max} open leases, the most --max-leases-per-identity allows; close one (or let it expire) first"
    )]
    TooManyLeases {
        /// The caller.
        identity: Identity,
        /// The bound.
        max: usize,
    },
    /// A `Redeclare` larger than one call may be.
    #[error(
        "a Redeclare of {bytes} bytes is larger than --max-redeclare-bytes {max}: send the legs in smaller calls"
    )]
    RedeclareTooLarge {
        /// Its encoded size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// A Router call without a credential control accepts.
    #[error("{0}")]
    RouterUnauthenticated(String),
    /// The leader advertises a plain `http://` URL while this replica serves TLS.
    #[error(
        "the leader {leader} advertises a plain-text URL and this replica serves TLS: not forwarded in clear (give every replica --tls-cert so that each advertises https://)"
    )]
    PlaintextLeader {
        /// The leader's URL.
        leader: String,
    },
    /// No such worker.
    #[error("unknown worker {0}")]
    UnknownWorker(WorkerId),
    /// A worker's launcher is asked through etcd, and this control has none.
    #[error("stop_when_drained asks the worker's launcher through etcd; this control runs without --etcd")]
    NoRegistry,
    /// etcd did not take the stop request.
    #[error("cannot put the stop request for {worker} in etcd: {reason}")]
    RegistryUnavailable {
        /// The worker.
        worker: WorkerId,
        /// etcd's error.
        reason: String,
    },
    /// No such rank on a known worker.
    #[error("unknown target {0}")]
    UnknownTarget(Target),
    /// W > 0 without a demand mode that scores.
    #[error(transparent)]
    WeightNeedsDemand(#[from] WeightNeedsDemand),
    /// An Admin call without the right bearer token.
    #[error("admin calls need the header `authorization: Bearer <token>` matching --admin-token")]
    Unauthenticated,
    /// Every candidate of the pool is at its rank's cap.
    #[error("every {} target for model \"{model}\" is at its cap (--max-requests-per-rank, --max-kv-usage)", kind.as_str())]
    AtCapacity {
        /// The model the pick was for.
        model: ModelName,
        /// The pick asked for.
        kind: PickKind,
    },
    /// A pick names a class the class file does not define.
    #[error("service class \"{0}\" is not defined (--service-classes)")]
    UnknownServiceClass(infera_proto::types::ServiceClassName),
    /// Fleet admission has no room for the decode pick now, or others wait before it.
    #[error(
        "no decode rank of model \"{model}\" admits the request within its class's ITL now; wait with wait_admission"
    )]
    AdmissionQueued {
        /// The model the pick was for.
        model: ModelName,
    },
    /// The pick waited until its class's TTFT target could no longer be met.
    #[error("model \"{model}\" could not admit the request within its class's TTFT target ({class})")]
    AdmissionShed {
        /// The model the pick was for.
        model: ModelName,
        /// Its class.
        class: infera_proto::types::ServiceClassName,
    },
    /// This control does not lead (or its leadership lapsed): it books nothing.
    #[error("{}", not_leader(.leader.as_deref(), *.lapsed))]
    NotLeader {
        /// The leader's URL, when one is known.
        leader: Option<String>,
        /// This control led, but could not renew its leadership in time.
        lapsed: bool,
    },
}

fn not_leader(leader: Option<&str>, lapsed: bool) -> String {
    match (leader, lapsed) {
        (_, true) => "this control's leadership lapsed (its etcd lease could have expired); it books nothing until re-elected".to_owned(),
        (Some(url), false) => format!("this control is not the leader; the leader is {url}"),
        (None, false) => "this control is not the leader, and no leader is known yet".to_owned(),
    }
}

fn pool_name(kind: PickKind) -> &'static str {
    match kind {
        PickKind::Prefill => "prefill",
        PickKind::Decode => "decode or mixed",
    }
}

fn pool_hint(kind: PickKind) -> &'static str {
    match kind {
        PickKind::Prefill => " (aggregated deployment: call PickDecode only)",
        PickKind::Decode => "",
    }
}

impl ControlError {
    /// The reason on the wire: it chooses the gRPC code, and names the `outcome` label of pick
    /// metrics.
    pub fn reason(&self) -> ErrorReason {
        match self {
            Self::InvalidArgument(_) => ErrorReason::InvalidArgument,
            Self::UnknownModel(_) => ErrorReason::UnknownModel,
            Self::NoPool { .. } => ErrorReason::NoPool,
            Self::NoEligibleTarget { .. } => ErrorReason::NoEligibleTarget,
            Self::NoCompatiblePair { .. } => ErrorReason::NoCompatiblePair,
            Self::UnknownLease(_) | Self::ForeignLease(_) => ErrorReason::UnknownLease,
            Self::UnknownReservation(_) | Self::ForeignReservation(_) => ErrorReason::UnknownReservation,
            Self::TooManyLeases { .. } => ErrorReason::TooManyLeases,
            Self::RedeclareTooLarge { .. } => ErrorReason::RedeclareTooLarge,
            Self::RouterUnauthenticated(_) => ErrorReason::Unauthenticated,
            Self::PlaintextLeader { .. } => ErrorReason::PlaintextLeader,
            Self::UnknownWorker(_) => ErrorReason::UnknownWorker,
            Self::NoRegistry => ErrorReason::NoRegistry,
            Self::RegistryUnavailable { .. } => ErrorReason::RegistryUnavailable,
            Self::UnknownTarget(_) => ErrorReason::UnknownTarget,
            Self::WeightNeedsDemand { .. } => ErrorReason::WeightNeedsDemand,
            Self::Unauthenticated => ErrorReason::Unauthenticated,
            Self::NotLeader { .. } => ErrorReason::NotLeader,
            Self::AtCapacity { .. } => ErrorReason::AtCapacity,
            Self::UnknownServiceClass(_) => ErrorReason::UnknownServiceClass,
            Self::AdmissionQueued { .. } => ErrorReason::AdmissionQueued,
            Self::AdmissionShed { .. } => ErrorReason::AdmissionShed,
        }
    }

    /// The gRPC code for this error (its reason's).
    pub fn code(&self) -> Code {
        self.reason().code()
    }

    /// Whether it named another identity's lease or reservation.
    pub fn is_foreign(&self) -> bool {
        matches!(self, Self::ForeignLease(_) | Self::ForeignReservation(_))
    }
}

impl From<ControlError> for Status {
    fn from(e: ControlError) -> Self {
        let leader = match &e {
            ControlError::NotLeader { leader, .. } => leader.clone(),
            _ => None,
        };
        e.reason().status_naming(e.to_string(), leader.as_deref())
    }
}

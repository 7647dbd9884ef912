//! Control's errors, and the one mapping of them to gRPC status codes.

use infera_proto::convert::ConvertError;
use infera_proto::types::{
    DecodeInputDemand, LeaseId, ModelName, PickKind, RequestWeight, ReservationId, Target, WorkerId,
};
use tonic::{Code, Status};

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
        /// The model.
        model: ModelName,
        /// The pick asked for.
        kind: PickKind,
    },
    /// Every target of the pool is drained.
    #[error("no eligible {} target for model \"{model}\": all are drained", kind.as_str())]
    NoEligibleTarget {
        /// The model.
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
    /// No such worker.
    #[error("unknown worker {0}")]
    UnknownWorker(WorkerId),
    /// No such rank on a known worker.
    #[error("unknown target {0}")]
    UnknownTarget(Target),
    /// W > 0 without a demand mode that scores.
    #[error(
        "decode request weight {weight} needs --decode-input-demand shadow or on (it is {mode}); \
         set the mode first, or set the weight to 0 before turning the mode off"
    )]
    WeightNeedsDemand {
        /// The weight that would be in force.
        weight: RequestWeight,
        /// The mode that would be in force.
        mode: DecodeInputDemand,
    },
    /// An Admin call without the right bearer token.
    #[error("admin calls need the header `authorization: Bearer <token>` matching --admin-token")]
    Unauthenticated,
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
    /// The gRPC code for this error; the only place codes are chosen.
    pub fn code(&self) -> Code {
        match self {
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::UnknownModel(_)
            | Self::UnknownLease(_)
            | Self::UnknownReservation(_)
            | Self::UnknownWorker(_)
            | Self::UnknownTarget(_) => Code::NotFound,
            Self::NoPool { .. } | Self::WeightNeedsDemand { .. } => Code::FailedPrecondition,
            Self::NoEligibleTarget { .. } => Code::Unavailable,
            Self::Unauthenticated => Code::Unauthenticated,
        }
    }

    /// A short machine-readable reason: the `outcome` label of pick metrics, and the
    /// `infera-error` metadata of the gRPC status, which callers branch on instead of the text.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::InvalidArgument(_) => "invalid_argument",
            Self::UnknownModel(_) => "unknown_model",
            Self::NoPool { .. } => "no_pool",
            Self::NoEligibleTarget { .. } => "no_eligible_target",
            Self::UnknownLease(_) => "unknown_lease",
            Self::UnknownReservation(_) => "unknown_reservation",
            Self::UnknownWorker(_) => "unknown_worker",
            Self::UnknownTarget(_) => "unknown_target",
            Self::WeightNeedsDemand { .. } => "weight_needs_demand",
            Self::Unauthenticated => "unauthenticated",
        }
    }
}

impl From<ControlError> for Status {
    fn from(e: ControlError) -> Self {
        let mut status = Status::new(e.code(), e.to_string());
        status.metadata_mut().insert(
            infera_proto::ERROR_REASON_METADATA,
            tonic::metadata::MetadataValue::from_static(e.outcome()),
        );
        status
    }
}

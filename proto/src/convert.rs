//! Wire ⇄ domain conversion, the only place that does it. Every check of a value that arrives
//! over gRPC happens here: unknown or unspecified enums, empty ids, malformed ids, out-of-range
//! numbers. Control maps a [`ConvertError`] to `INVALID_ARGUMENT` in one place; the proxy drops
//! (and logs) an answer of control's that does not convert. The other way, domain → wire, is
//! [`to_wire`]: `From` impls that cannot fail.

#[cfg(test)]
mod tests;
mod to_wire;

pub use to_wire::timestamp;

use std::time::{Duration, SystemTime};

use crate::pb;
use crate::types::{
    Admission, CreditError, DeclaredLeg, DecodeInputDemand, DpRank, IdParseError, LeaseId, LegFailure,
    MAX_DECLARED_LEGS, MAX_EXCLUDED_TARGETS, MAX_ID_BYTES, MAX_PAGE_HASHES, MAX_REQUEST_TOKENS, ModelName,
    OverlapCredit, PickKind, PickRequest, Picked, Release, ReleaseReason, RequestId, RequestWeight,
    ReservationId, Role, ServiceClassName, SessionKey, Target, TenantId, WeightError, WorkerId, WorkerRecord,
};

/// A wire value that does not make a domain value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct ConvertError {
    /// The offending field, as named in the `.proto`.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// Required and empty.
    #[error("must not be empty")]
    Empty,
    /// A required message field is absent.
    #[error("is required")]
    Missing,
    /// An enum number this version does not know.
    #[error("unknown enum value {0}")]
    UnknownEnum(i32),
    /// The enum's UNSPECIFIED value where a choice is required.
    #[error("must be specified")]
    Unspecified,
    /// A value callers may not send.
    #[error("{0}")]
    NotAllowed(&'static str),
    /// A malformed id.
    #[error(transparent)]
    Id(#[from] IdParseError),
    /// A weight outside its domain.
    #[error(transparent)]
    Weight(#[from] WeightError),
    /// An overlap credit outside its domain.
    #[error(transparent)]
    Credit(#[from] CreditError),
    /// A number above its maximum.
    #[error("{value} exceeds the maximum {max}")]
    TooLarge {
        /// What was sent.
        value: u64,
        /// The largest accepted.
        max: u64,
    },
}

fn err(field: &'static str, problem: impl Into<Problem>) -> ConvertError {
    ConvertError { field, problem: problem.into() }
}

fn non_empty(field: &'static str, s: String) -> Result<String, ConvertError> {
    if s.trim().is_empty() { Err(err(field, Problem::Empty)) } else { bounded(field, s) }
}

/// `s`, unless it is longer than [`MAX_ID_BYTES`].
fn bounded(field: &'static str, s: String) -> Result<String, ConvertError> {
    if s.len() > MAX_ID_BYTES {
        return Err(err(field, Problem::TooLarge { value: s.len() as u64, max: MAX_ID_BYTES as u64 }));
    }
    Ok(s)
}

/// Parses a lease id.
pub fn lease_id(field: &'static str, s: &str) -> Result<LeaseId, ConvertError> {
    if s.is_empty() {
        return Err(err(field, Problem::Empty));
    }
    s.parse().map_err(|e| err(field, Problem::Id(e)))
}

/// The most bytes of a lease's holder name (`OpenLease.holder`).
pub const MAX_HOLDER_BYTES: usize = 256;

/// A lease's holder name: free text, may be empty, at most [`MAX_HOLDER_BYTES`].
pub fn lease_holder(field: &'static str, s: String) -> Result<String, ConvertError> {
    if s.len() > MAX_HOLDER_BYTES {
        return Err(err(field, Problem::TooLarge { value: s.len() as u64, max: MAX_HOLDER_BYTES as u64 }));
    }
    Ok(s)
}

/// Parses a reservation id.
pub fn reservation_id(field: &'static str, s: &str) -> Result<ReservationId, ConvertError> {
    if s.is_empty() {
        return Err(err(field, Problem::Empty));
    }
    s.parse().map_err(|e| err(field, Problem::Id(e)))
}

/// A pick request; both `PickPrefill` and `PickDecode` take it.
pub fn pick_request(m: pb::PickRequest) -> Result<PickRequest, ConvertError> {
    if m.input_tokens > MAX_REQUEST_TOKENS {
        return Err(err(
            "input_tokens",
            Problem::TooLarge { value: m.input_tokens, max: MAX_REQUEST_TOKENS },
        ));
    }
    let (field, page_hashes) = match (m.page_hashes.is_empty(), m.fixed_page_hashes.is_empty()) {
        (false, false) => {
            return Err(err(
                "page_hashes",
                Problem::NotAllowed("give page_hashes or fixed_page_hashes, not both"),
            ));
        }
        (false, true) => ("page_hashes", m.page_hashes),
        (true, _) => ("fixed_page_hashes", m.fixed_page_hashes),
    };
    if page_hashes.len() > MAX_PAGE_HASHES {
        let value = page_hashes.len() as u64;
        return Err(err(field, Problem::TooLarge { value, max: MAX_PAGE_HASHES as u64 }));
    }
    if !page_hashes.is_empty() && m.page_size == 0 {
        return Err(err("page_size", Problem::NotAllowed("must be positive when page_hashes are given")));
    }
    if m.exclude.len() > MAX_EXCLUDED_TARGETS {
        let value = m.exclude.len() as u64;
        return Err(err("exclude", Problem::TooLarge { value, max: MAX_EXCLUDED_TARGETS as u64 }));
    }
    let exclude = m
        .exclude
        .iter()
        .map(|t| Ok(Target::new(worker_id("exclude.worker_id", t.worker_id.clone())?, DpRank(t.dp_rank))))
        .collect::<Result<_, ConvertError>>()?;
    Ok(PickRequest {
        exclude,
        lease: lease_id("lease_id", &m.lease_id)?,
        request_id: RequestId::new(non_empty("request_id", m.request_id)?),
        model: ModelName::new(non_empty("model", m.model)?),
        input_tokens: m.input_tokens,
        session: match m.session_key {
            key if key.is_empty() => None,
            key => Some(SessionKey::new(bounded("session_key", key)?)),
        },
        page_size: if page_hashes.is_empty() { 0 } else { m.page_size },
        page_hashes,
        admission: Admission {
            class: match m.service_class {
                c if c.is_empty() => None,
                c => Some(ServiceClassName::new(bounded("service_class", c)?)),
            },
            tenant: match m.tenant {
                t if t.is_empty() => None,
                t => Some(TenantId::new(bounded("tenant", t)?)),
            },
            arrived: (m.arrived_unix_ms > 0)
                .then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(m.arrived_unix_ms)),
            wait: m.wait_admission,
        },
    })
}

/// A release request: the reservation, why it ended and, for a failed leg, how.
/// `LEASE_EXPIRED` is control's own; a failure kind only comes with `FAILED`.
pub fn release_request(m: &pb::ReleaseRequest) -> Result<Release, ConvertError> {
    let (id, reason) = release_reason(m)?;
    let failure = match pb::LegFailure::try_from(m.failure) {
        Err(_) => return Err(err("failure", Problem::UnknownEnum(m.failure))),
        Ok(pb::LegFailure::Unspecified) => None,
        Ok(_) if reason != ReleaseReason::Failed => {
            return Err(err("failure", Problem::NotAllowed("only with reason RELEASE_REASON_FAILED")));
        }
        Ok(pb::LegFailure::Connect) => Some(LegFailure::Connect),
        Ok(pb::LegFailure::Timeout) => Some(LegFailure::Timeout),
        Ok(pb::LegFailure::ServerError) => Some(LegFailure::ServerError),
        Ok(pb::LegFailure::StreamCut) => Some(LegFailure::StreamCut),
    };
    Ok(Release { id, reason, failure })
}

/// Releases a `ReleaseMany` carries at most.
pub const MAX_RELEASES_PER_CALL: usize = 4096;

/// The releases of a `ReleaseMany`, each converted on its own (a bad one does not spoil the
/// others); the call fails only when it carries too many.
pub fn release_many_request(
    m: &pb::ReleaseManyRequest,
) -> Result<Vec<Result<Release, ConvertError>>, ConvertError> {
    if m.releases.len() > MAX_RELEASES_PER_CALL {
        let value = m.releases.len() as u64;
        return Err(err("releases", Problem::TooLarge { value, max: MAX_RELEASES_PER_CALL as u64 }));
    }
    Ok(m.releases.iter().map(release_request).collect())
}

fn release_reason(m: &pb::ReleaseRequest) -> Result<(ReservationId, ReleaseReason), ConvertError> {
    let id = reservation_id("reservation_id", &m.reservation_id)?;
    let reason = match pb::ReleaseReason::try_from(m.reason) {
        Err(_) => return Err(err("reason", Problem::UnknownEnum(m.reason))),
        Ok(pb::ReleaseReason::Unspecified) => return Err(err("reason", Problem::Unspecified)),
        Ok(pb::ReleaseReason::Eof) => ReleaseReason::Eof,
        Ok(pb::ReleaseReason::Cancelled) => ReleaseReason::Cancelled,
        Ok(pb::ReleaseReason::Failed) => ReleaseReason::Failed,
        Ok(pb::ReleaseReason::TargetRemoved) => ReleaseReason::TargetRemoved,
        Ok(pb::ReleaseReason::LeaseExpired) => {
            return Err(err("reason", Problem::NotAllowed("LEASE_EXPIRED is set by control only")));
        }
    };
    Ok((id, reason))
}

/// A `Redeclare`: the new lease and the legs to book under it.
pub fn redeclare_request(m: pb::RedeclareRequest) -> Result<(LeaseId, Vec<DeclaredLeg>), ConvertError> {
    let lease = lease_id("lease_id", &m.lease_id)?;
    if m.legs.len() > MAX_DECLARED_LEGS {
        let value = m.legs.len() as u64;
        return Err(err("legs", Problem::TooLarge { value, max: MAX_DECLARED_LEGS as u64 }));
    }
    let legs = m.legs.into_iter().map(declared_leg).collect::<Result<_, _>>()?;
    Ok((lease, legs))
}

fn declared_leg(m: pb::DeclaredLeg) -> Result<DeclaredLeg, ConvertError> {
    if m.input_tokens > MAX_REQUEST_TOKENS {
        let value = m.input_tokens;
        return Err(err("legs.input_tokens", Problem::TooLarge { value, max: MAX_REQUEST_TOKENS }));
    }
    let kind = kind_filter("legs.kind", m.kind)?.ok_or_else(|| err("legs.kind", Problem::Unspecified))?;
    Ok(DeclaredLeg {
        kind,
        target: {
            let t = m.target.as_ref().ok_or_else(|| err("legs.target", Problem::Missing))?;
            Target::new(worker_id("legs.target.worker_id", t.worker_id.clone())?, DpRank(t.dp_rank))
        },
        model: ModelName::new(non_empty("legs.model", m.model)?),
        request_id: RequestId::new(non_empty("legs.request_id", m.request_id)?),
        input_tokens: m.input_tokens,
        age: Duration::from_millis(m.age_ms),
        previous: match m.previous_reservation_id.as_str() {
            "" => None,
            id => Some(reservation_id("legs.previous_reservation_id", id)?),
        },
    })
}

/// A request weight.
pub fn request_weight(field: &'static str, w: f64) -> Result<RequestWeight, ConvertError> {
    RequestWeight::new(w).map_err(|e| err(field, e))
}

/// A prefill overlap credit.
pub fn overlap_credit(field: &'static str, c: f64) -> Result<OverlapCredit, ConvertError> {
    OverlapCredit::new(c).map_err(|e| err(field, e))
}

/// A demand mode; UNSPECIFIED is rejected.
pub fn decode_input_demand(field: &'static str, v: i32) -> Result<DecodeInputDemand, ConvertError> {
    match pb::DecodeInputDemand::try_from(v) {
        Err(_) => Err(err(field, Problem::UnknownEnum(v))),
        Ok(pb::DecodeInputDemand::Unspecified) => Err(err(field, Problem::Unspecified)),
        Ok(pb::DecodeInputDemand::Off) => Ok(DecodeInputDemand::Off),
        Ok(pb::DecodeInputDemand::Shadow) => Ok(DecodeInputDemand::Shadow),
        Ok(pb::DecodeInputDemand::On) => Ok(DecodeInputDemand::On),
    }
}

/// An optional role filter: UNSPECIFIED means "any".
pub fn role_filter(field: &'static str, v: i32) -> Result<Option<Role>, ConvertError> {
    match pb::Role::try_from(v) {
        Err(_) => Err(err(field, Problem::UnknownEnum(v))),
        Ok(pb::Role::Unspecified) => Ok(None),
        Ok(pb::Role::Prefill) => Ok(Some(Role::Prefill)),
        Ok(pb::Role::Decode) => Ok(Some(Role::Decode)),
        Ok(pb::Role::Mixed) => Ok(Some(Role::Mixed)),
    }
}

/// Picks a `PickMany` carries at most.
pub const MAX_PICKS_PER_CALL: usize = 1024;

/// The picks of a `PickMany`, left for the caller to convert one by one (a bad one does not
/// spoil the others); the call fails only when it carries too many.
pub fn pick_many_request(m: pb::PickManyRequest) -> Result<Vec<pb::PickItem>, ConvertError> {
    if m.picks.len() > MAX_PICKS_PER_CALL {
        let value = m.picks.len() as u64;
        return Err(err("picks", Problem::TooLarge { value, max: MAX_PICKS_PER_CALL as u64 }));
    }
    Ok(m.picks)
}

/// The kind of one pick of a `PickMany`: PREFILL or DECODE.
pub fn pick_kind(field: &'static str, v: i32) -> Result<PickKind, ConvertError> {
    kind_filter(field, v)?.ok_or_else(|| err(field, Problem::Unspecified))
}

/// The request of one pick of a `PickMany`.
pub fn item_pick(m: Option<pb::PickRequest>) -> Result<PickRequest, ConvertError> {
    pick_request(m.ok_or_else(|| err("picks.pick", Problem::Missing))?)
}

/// An optional pick-kind filter: UNSPECIFIED means "both".
pub fn kind_filter(field: &'static str, v: i32) -> Result<Option<PickKind>, ConvertError> {
    match pb::PickKind::try_from(v) {
        Err(_) => Err(err(field, Problem::UnknownEnum(v))),
        Ok(pb::PickKind::Unspecified) => Ok(None),
        Ok(pb::PickKind::Prefill) => Ok(Some(PickKind::Prefill)),
        Ok(pb::PickKind::Decode) => Ok(Some(PickKind::Decode)),
    }
}

/// An optional, non-empty name filter.
pub fn name_filter(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A worker id that must be present.
pub fn worker_id(field: &'static str, s: String) -> Result<WorkerId, ConvertError> {
    Ok(WorkerId::new(non_empty(field, s)?))
}

/// A drain/resume selector: a worker and optionally one rank.
pub fn drain_request(m: pb::DrainTargetRequest) -> Result<DrainAsk, ConvertError> {
    let worker = worker_id("worker_id", m.worker_id)?;
    if m.stop_when_drained && m.dp_rank.is_some() {
        return Err(err(
            "dp_rank",
            Problem::NotAllowed("a worker is stopped whole: leave dp_rank unset with stop_when_drained"),
        ));
    }
    Ok(DrainAsk { worker, rank: m.dp_rank.map(DpRank), stop_when_drained: m.stop_when_drained })
}

/// A `DrainTarget` or `ResumeTarget` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainAsk {
    /// The worker.
    pub worker: WorkerId,
    /// One rank of it (`None`: every rank).
    pub rank: Option<DpRank>,
    /// Have its launcher drain and stop it (a whole worker).
    pub stop_when_drained: bool,
}

/// A role that must be given (a worker's own).
pub fn role(field: &'static str, v: i32) -> Result<Role, ConvertError> {
    role_filter(field, v)?.ok_or_else(|| err(field, Problem::Unspecified))
}

/// A target: a worker id that must be present and a rank.
pub fn target(m: &pb::Target) -> Result<Target, ConvertError> {
    Ok(Target::new(worker_id("target.worker_id", m.worker_id.clone())?, DpRank(m.dp_rank)))
}

/// The worker behind a target as control describes it (`ListTargets`, a pick's answer): a
/// record without the registry's extras (version, KV-event sockets, labels). A bootstrap port
/// of 0 or above 65535 means none; a `dp_size` of 0 is kept for the caller to judge.
pub fn worker_endpoint(m: &pb::WorkerEndpoint) -> Result<WorkerRecord, ConvertError> {
    let id = worker_id("worker.worker_id", m.worker_id.clone())?;
    let role = role("worker.role", m.role)?;
    let url = non_empty("worker.url", m.url.clone())?;
    crate::types::check_worker_url(&url).map_err(|why| err("worker.url", Problem::NotAllowed(why)))?;
    let model = ModelName::new(non_empty("worker.model", m.model.clone())?);
    if m.dp_size > crate::types::MAX_DP_RANKS {
        let max = u64::from(crate::types::MAX_DP_RANKS);
        return Err(err("worker.dp_size", Problem::TooLarge { value: u64::from(m.dp_size), max }));
    }
    Ok(WorkerRecord {
        id,
        role,
        url,
        model,
        bootstrap_port: u16::try_from(m.bootstrap_port).ok().filter(|p| *p != 0),
        dp_size: m.dp_size,
        page_size: m.page_size,
        transfer_backend: Some(m.transfer_backend.clone()).filter(|s| !s.is_empty()),
        kv_cache_dtype: Some(m.kv_cache_dtype.clone()).filter(|s| !s.is_empty()),
        sglang_version: Some(m.sglang_version.clone()).filter(|s| !s.is_empty()),
        kv_events: None,
        load_events: None,
        labels: Default::default(),
    })
}

/// A pick's answer: the reservation, the target and its worker.
pub fn picked(m: &pb::PickResponse) -> Result<Picked, ConvertError> {
    Ok(Picked {
        reservation: reservation_id("reservation_id", &m.reservation_id)?,
        target: target(m.target.as_ref().ok_or_else(|| err("target", Problem::Missing))?)?,
        worker: worker_endpoint(m.worker.as_ref().ok_or_else(|| err("worker", Problem::Missing))?)?,
    })
}

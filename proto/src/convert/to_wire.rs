//! Domain → wire: every domain value the services send, as its message. Nothing here can fail.

use std::time::SystemTime;

use crate::pb;
use crate::types::{
    DeclaredLeg, DecodeInputDemand, DecodePolicy, LegFailure, PickKind, PickRequest, Release, ReleaseReason,
    Role, Target, WorkerRecord,
};

impl From<&PickRequest> for pb::PickRequest {
    fn from(p: &PickRequest) -> Self {
        pb::PickRequest {
            lease_id: p.lease.to_string(),
            request_id: p.request_id.to_string(),
            model: p.model.to_string(),
            input_tokens: p.input_tokens,
            session_key: p.session.as_ref().map(ToString::to_string).unwrap_or_default(),
            page_hashes: Vec::new(),
            fixed_page_hashes: p.page_hashes.clone(),
            page_size: p.page_size,
            exclude: p.exclude.iter().map(pb::Target::from).collect(),
            service_class: p.admission.class.as_ref().map(ToString::to_string).unwrap_or_default(),
            tenant: p.admission.tenant.as_ref().map(ToString::to_string).unwrap_or_default(),
            arrived_unix_ms: p
                .admission
                .arrived
                .map_or(0, |t| t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)),
            wait_admission: p.admission.wait,
        }
    }
}

impl From<LegFailure> for pb::LegFailure {
    fn from(f: LegFailure) -> Self {
        match f {
            LegFailure::Connect => Self::Connect,
            LegFailure::Timeout => Self::Timeout,
            LegFailure::ServerError => Self::ServerError,
            LegFailure::StreamCut => Self::StreamCut,
        }
    }
}

impl From<&DeclaredLeg> for pb::DeclaredLeg {
    fn from(l: &DeclaredLeg) -> Self {
        pb::DeclaredLeg {
            kind: pb::PickKind::from(l.kind) as i32,
            target: Some((&l.target).into()),
            model: l.model.to_string(),
            request_id: l.request_id.to_string(),
            input_tokens: l.input_tokens,
            age_ms: u64::try_from(l.age.as_millis()).unwrap_or(u64::MAX),
            previous_reservation_id: l.previous.map(|r| r.to_string()).unwrap_or_default(),
        }
    }
}

impl From<ReleaseReason> for pb::ReleaseReason {
    fn from(r: ReleaseReason) -> Self {
        match r {
            ReleaseReason::Eof => pb::ReleaseReason::Eof,
            ReleaseReason::Cancelled => pb::ReleaseReason::Cancelled,
            ReleaseReason::Failed => pb::ReleaseReason::Failed,
            ReleaseReason::LeaseExpired => pb::ReleaseReason::LeaseExpired,
            ReleaseReason::TargetRemoved => pb::ReleaseReason::TargetRemoved,
        }
    }
}

impl From<&Release> for pb::ReleaseRequest {
    fn from(r: &Release) -> Self {
        pb::ReleaseRequest {
            reservation_id: r.id.to_string(),
            reason: pb::ReleaseReason::from(r.reason) as i32,
            failure: r.failure.map_or(0, |f| pb::LegFailure::from(f) as i32),
        }
    }
}

impl From<&Target> for pb::Target {
    fn from(t: &Target) -> Self {
        pb::Target { worker_id: t.worker.to_string(), dp_rank: t.rank.0 }
    }
}

impl From<Role> for pb::Role {
    fn from(r: Role) -> Self {
        match r {
            Role::Prefill => pb::Role::Prefill,
            Role::Decode => pb::Role::Decode,
            Role::Mixed => pb::Role::Mixed,
        }
    }
}

impl From<DecodeInputDemand> for pb::DecodeInputDemand {
    fn from(m: DecodeInputDemand) -> Self {
        match m {
            DecodeInputDemand::Off => pb::DecodeInputDemand::Off,
            DecodeInputDemand::Shadow => pb::DecodeInputDemand::Shadow,
            DecodeInputDemand::On => pb::DecodeInputDemand::On,
        }
    }
}

impl From<DecodePolicy> for pb::DecodePolicy {
    fn from(p: DecodePolicy) -> Self {
        match p {
            DecodePolicy::RoundRobin => pb::DecodePolicy::RoundRobin,
            DecodePolicy::Random => pb::DecodePolicy::Random,
            DecodePolicy::PowerOfTwo => pb::DecodePolicy::PowerOfTwo,
            DecodePolicy::LeastRunning => pb::DecodePolicy::LeastRunning,
        }
    }
}

impl From<PickKind> for pb::PickKind {
    fn from(k: PickKind) -> Self {
        match k {
            PickKind::Prefill => pb::PickKind::Prefill,
            PickKind::Decode => pb::PickKind::Decode,
        }
    }
}

impl From<&WorkerRecord> for pb::WorkerEndpoint {
    fn from(w: &WorkerRecord) -> Self {
        pb::WorkerEndpoint {
            worker_id: w.id.to_string(),
            role: pb::Role::from(w.role) as i32,
            model: w.model.to_string(),
            url: w.url.clone(),
            bootstrap_port: w.bootstrap_port.map_or(0, u32::from),
            dp_size: w.dp_size,
            page_size: w.page_size,
            transfer_backend: w.transfer_backend.clone().unwrap_or_default(),
            kv_cache_dtype: w.kv_cache_dtype.clone().unwrap_or_default(),
            sglang_version: w.sglang_version.clone().unwrap_or_default(),
        }
    }
}

/// A wall-clock time as a protobuf timestamp.
pub fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

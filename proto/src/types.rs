//! Domain types shared by control, proxy, launcher, the tokenizer and sim.

mod api;
mod ids;
mod listen;
mod modes;
mod pick;
mod redeclare;
mod release;
mod worker;

pub use api::Api;
pub use ids::{
    DpRank, IdParseError, LeaseId, ModelName, RequestId, ReservationId, ServiceClassName, SessionKey, Target,
    TenantId, WorkerId,
};
pub use listen::same_socket;
pub use modes::{
    CreditError, DecodeInputDemand, DecodePolicy, OverlapCredit, PickKind, PrefillPolicy, RequestWeight,
    WeightError, WeightNeedsDemand,
};
pub use pick::{
    Admission, MAX_EXCLUDED_TARGETS, MAX_ID_BYTES, MAX_PAGE_HASHES, MAX_REQUEST_TOKENS, PickRequest, Picked,
};
pub use redeclare::{DeclaredLeg, MAX_DECLARED_LEGS, REDECLARE_CHUNK_BYTES};
pub use release::{LegFailure, Release, ReleaseReason};
pub use worker::{
    KvEventsSource, MAX_DP_RANKS, RegisteredWorker, Role, WorkerRecord, check_worker_url,
    load_endpoint_for_rank,
};

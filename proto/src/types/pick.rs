//! A pick as control sees it, after the wire boundary checked it, and its answer as the proxy
//! sees it.

use std::time::SystemTime;

use super::{
    LeaseId, ModelName, RequestId, ReservationId, ServiceClassName, SessionKey, Target, TenantId,
    WorkerRecord,
};

/// The longest request id, model name or session key a pick (or a proxy's request) carries, in
/// bytes: each is kept in control's state (a session key is a key of its session map).
pub const MAX_ID_BYTES: usize = 256;

/// The largest input-token count a pick accepts (2^28, about 268 M): far beyond any model's
/// context, small enough that no sum in the ledger can overflow or lose precision.
pub const MAX_REQUEST_TOKENS: u64 = 1 << 28;

/// The most targets a pick may exclude (a retry names those its earlier attempts failed on).
pub const MAX_EXCLUDED_TARGETS: usize = 64;

/// The most page hashes a pick may carry (2^20 pages: a 16 M-token prompt at page size 16).
pub const MAX_PAGE_HASHES: usize = 1 << 20;

/// One request asking for a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickRequest {
    /// The proxy's lease; the reservation belongs to it.
    pub lease: LeaseId,
    /// Carried across both legs; empty ids are replaced by the proxy before the pick.
    pub request_id: RequestId,
    /// Picks are per model.
    pub model: ModelName,
    /// Input tokens, at most [`MAX_REQUEST_TOKENS`].
    pub input_tokens: u64,
    /// Multi-turn session key, for prefill affinity.
    pub session: Option<SessionKey>,
    /// The prompt's page hashes (`infera_kv::hash`), for KV-aware prefill; empty = unknown.
    pub page_hashes: Vec<i64>,
    /// Tokens per page of `page_hashes` (0 when there are none).
    pub page_size: u32,
    /// Targets this request already failed on (a retry): passed by unless none would be left.
    pub exclude: Vec<Target>,
    /// What fleet admission needs of it (its class, tenant and arrival).
    pub admission: Admission,
}

/// What fleet admission knows of a request (`manual/features/service_classes.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// Its service class; `None` = control's default class.
    pub class: Option<ServiceClassName>,
    /// Whose share of the queue it uses; `None` = the anonymous tenant.
    pub tenant: Option<TenantId>,
    /// When it reached the proxy; `None` = when control sees the pick.
    pub arrived: Option<SystemTime>,
    /// Whether a decode pick admission refuses waits in control's queue (a unary call).
    pub wait: bool,
}

/// What control answered a pick with.
#[derive(Clone, Debug, PartialEq)]
pub struct Picked {
    /// The booking, released when the leg ends.
    pub reservation: ReservationId,
    /// The chosen target.
    pub target: Target,
    /// The worker behind it.
    pub worker: WorkerRecord,
}

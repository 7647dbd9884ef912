//! Engine facts: what a worker's own `GET /server_info` says about it, read for every worker
//! before it becomes a routing target, and checked against its registry record.
//!
//! SGLang serves its resolved server arguments at the top level of `/server_info`
//! (`sglang/srt/entrypoints/http_server.py`, `server_info`), so the engine is the authority on
//! what it runs: its DP ranks, KV page size, transfer backend and KV cache dtype. A record that
//! says otherwise is corrected (and the disagreement reported, [`RecordMismatch`]). A record
//! naming a model the engine does not serve, or a role its `disaggregation_mode` contradicts,
//! describes some other worker: it is held out of routing ([`HeldOut`]).
//!
//! This file is the pure part (parsing, reconciling); [`discovery`] asks the workers.

use std::fmt;

use infera_proto::types::{RegisteredWorker, Role, WorkerRecord};
use serde_json::{Map, Value};

pub mod discovery;

/// A `/server_info` body that does not say what control needs.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedServerInfo {
    /// Not a JSON object.
    #[error("the answer is not a JSON object")]
    NotAnObject,
    /// No `dp_size` key.
    #[error("the answer has no dp_size")]
    NoDpSize,
    /// `dp_size`, `attn_dp_size` or `page_size` is not a whole number ≥ 1 that fits a u32.
    #[error("{key} is {value}, not a whole number of at least 1")]
    NotASize {
        /// `dp_size`, `attn_dp_size` or `page_size`.
        key: &'static str,
        /// The value as the worker sent it.
        value: String,
    },
    /// `dp_size × attn_dp_size` does not fit a u32.
    #[error("dp_size {dp_size} × attn_dp_size {attn_dp_size} is too large")]
    TooLarge {
        /// Replicas (or, before SGLang 0.5.22, attention-DP ranks).
        dp_size: u32,
        /// Attention-DP ranks (SGLang 0.5.22+).
        attn_dp_size: u32,
    },
}

/// What an engine runs as, by its `disaggregation_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineMode {
    /// `null`: aggregated (prefill and decode in one engine).
    Aggregated,
    /// `prefill`.
    Prefill,
    /// `decode`.
    Decode,
}

impl EngineMode {
    /// The role a record of an engine in this mode must have.
    pub fn role(self) -> Role {
        match self {
            Self::Aggregated => Role::Mixed,
            Self::Prefill => Role::Prefill,
            Self::Decode => Role::Decode,
        }
    }

    /// SGLang's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aggregated => "null",
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }
}

/// What a worker's `/server_info` says about it. `None`: the answer does not say (control then
/// goes by the record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineFacts {
    /// DP ranks behind the HTTP port: `dp_size × attn_dp_size` ([`ranks_of`]).
    pub ranks: u32,
    /// `page_size`: KV page size in tokens.
    pub page_size: Option<u32>,
    /// `served_model_name`.
    pub served_model_name: Option<String>,
    /// `model_path`.
    pub model_path: Option<String>,
    /// `disaggregation_mode`; `None` when absent or a value SGLang does not define.
    pub mode: Option<EngineMode>,
    /// `disaggregation_transfer_backend`.
    pub transfer_backend: Option<String>,
    /// `kv_cache_dtype`.
    pub kv_cache_dtype: Option<String>,
}

/// The facts of a `/server_info` body.
///
/// # Errors
/// When the body is not a JSON object, has no usable `dp_size`, or a size that is not a whole
/// number ≥ 1.
pub fn parse(body: &[u8]) -> Result<EngineFacts, MalformedServerInfo> {
    let info: Value = serde_json::from_slice(body).map_err(|_| MalformedServerInfo::NotAnObject)?;
    let info = info.as_object().ok_or(MalformedServerInfo::NotAnObject)?;
    let text = |key: &str| info.get(key).and_then(Value::as_str).map(str::to_owned);
    // SGLang's `--disaggregation-mode` choices (`sglang/srt/server_args.py`); `null` is a string
    // there, and a JSON null is read the same.
    let mode = match info.get("disaggregation_mode") {
        Some(Value::Null) => Some(EngineMode::Aggregated),
        Some(Value::String(m)) => match m.as_str() {
            "null" => Some(EngineMode::Aggregated),
            "prefill" => Some(EngineMode::Prefill),
            "decode" => Some(EngineMode::Decode),
            _ => None,
        },
        _ => None,
    };
    Ok(EngineFacts {
        ranks: ranks_in(info)?,
        page_size: size(info, "page_size")?,
        served_model_name: text("served_model_name"),
        model_path: text("model_path"),
        mode,
        transfer_backend: text("disaggregation_transfer_backend"),
        kv_cache_dtype: text("kv_cache_dtype"),
    })
}

/// The DP ranks a `/server_info` answer describes: `dp_size × attn_dp_size`.
///
/// SGLang 0.5.22+ reports replicas in `dp_size` and attention-DP ranks in `attn_dp_size` (the
/// deprecated `--dp-size N --enable-dp-attention` resolves to `attn_dp_size = N, dp_size = 1`),
/// and routes `routed_dp_rank` over `num_dp_ranks = dp_size × attn_dp_size`
/// (`sglang/srt/runtime_context.py`); before 0.5.22 there is no `attn_dp_size` and `dp_size` is
/// the rank count either way.
///
/// # Errors
/// When the body does not give the count.
pub fn ranks_of(body: &[u8]) -> Result<u32, MalformedServerInfo> {
    parse(body).map(|f| f.ranks)
}

fn ranks_in(info: &Map<String, Value>) -> Result<u32, MalformedServerInfo> {
    let dp_size = size(info, "dp_size")?.ok_or(MalformedServerInfo::NoDpSize)?;
    let attn_dp_size = size(info, "attn_dp_size")?.unwrap_or(1);
    dp_size.checked_mul(attn_dp_size).ok_or(MalformedServerInfo::TooLarge { dp_size, attn_dp_size })
}

/// `key` as a whole number ≥ 1; `None` when absent or null.
fn size(info: &Map<String, Value>, key: &'static str) -> Result<Option<u32>, MalformedServerInfo> {
    let Some(v) = info.get(key).filter(|v| !v.is_null()) else { return Ok(None) };
    let n = v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n >= 1);
    n.map(Some).ok_or_else(|| MalformedServerInfo::NotASize { key, value: v.to_string() })
}

/// A record field whose value the engine contradicts; control goes by the engine's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMismatch {
    /// The field: `dp_size`, `page_size`, `transfer_backend` or `kv_cache_dtype` (the `field`
    /// label of `infera_router_record_mismatches_total`).
    pub field: &'static str,
    /// What the record says.
    pub record: String,
    /// What the engine runs.
    pub engine: String,
}

impl fmt::Display for RecordMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the record says {} {}, the engine runs {}", self.field, self.record, self.engine)
    }
}

/// Why a worker's engine is not the worker its record describes (it takes no picks).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeldOut {
    /// The engine serves another model.
    #[error(
        "the record's model is \"{record}\", but the engine serves served_model_name {} (model_path {})",
        shown(served.as_deref()),
        shown(path.as_deref())
    )]
    Model {
        /// The record's model.
        record: String,
        /// The engine's `served_model_name`.
        served: Option<String>,
        /// The engine's `model_path`.
        path: Option<String>,
    },
    /// The engine runs another role.
    #[error("the record's role is {}, but the engine runs disaggregation_mode {}", record.as_str(), engine.as_str())]
    Role {
        /// The record's role.
        record: Role,
        /// The engine's mode.
        engine: EngineMode,
    },
}

impl HeldOut {
    /// The `reason` label of a failed discovery: `model_mismatch` or `role_mismatch`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Model { .. } => "model_mismatch",
            Self::Role { .. } => "role_mismatch",
        }
    }
}

fn shown(v: Option<&str>) -> String {
    v.map_or_else(|| "unknown".to_owned(), |v| format!("\"{v}\""))
}

/// A registered worker made routable by its engine's facts.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconciled {
    /// The worker to route to: the record with the engine's ranks, page size, transfer backend
    /// and KV cache dtype (each where the engine says).
    pub record: WorkerRecord,
    /// The record's fields the engine contradicted, in field order.
    pub mismatches: Vec<RecordMismatch>,
}

/// Checks `registered` against its engine's `facts` and gives the worker control routes to:
/// the engine wins for `dp_size`, `page_size`, `transfer_backend` and `kv_cache_dtype`.
///
/// # Errors
/// [`HeldOut`] when neither the engine's `served_model_name` nor its `model_path` is the record's
/// model (an engine that gives neither is not judged), or when its `disaggregation_mode`
/// contradicts the record's role.
pub fn reconcile(registered: RegisteredWorker, facts: &EngineFacts) -> Result<Reconciled, HeldOut> {
    let model = registered.model.as_str();
    let names = [facts.served_model_name.as_deref(), facts.model_path.as_deref()];
    if names.iter().any(Option::is_some) && !names.contains(&Some(model)) {
        return Err(HeldOut::Model {
            record: model.to_owned(),
            served: facts.served_model_name.clone(),
            path: facts.model_path.clone(),
        });
    }
    if let Some(mode) = facts.mode
        && mode.role() != registered.role
    {
        return Err(HeldOut::Role { record: registered.role, engine: mode });
    }
    let mut mismatches = Vec::new();
    let mut differ = |field, record: Option<String>, engine: Option<String>| {
        if let (Some(record), Some(engine)) = (record, engine)
            && record != engine
        {
            mismatches.push(RecordMismatch { field, record, engine });
        }
    };
    differ("dp_size", registered.dp_size.map(|n| n.to_string()), Some(facts.ranks.to_string()));
    differ("page_size", Some(registered.page_size.to_string()), facts.page_size.map(|p| p.to_string()));
    differ("transfer_backend", registered.transfer_backend.clone(), facts.transfer_backend.clone());
    differ("kv_cache_dtype", registered.kv_cache_dtype.clone(), facts.kv_cache_dtype.clone());
    let mut record = registered.with_discovered_ranks(facts.ranks);
    if let Some(page_size) = facts.page_size {
        record.page_size = page_size;
    }
    if facts.transfer_backend.is_some() {
        record.transfer_backend.clone_from(&facts.transfer_backend);
    }
    if facts.kv_cache_dtype.is_some() {
        record.kv_cache_dtype.clone_from(&facts.kv_cache_dtype);
    }
    Ok(Reconciled { record, mismatches })
}

#[cfg(test)]
mod tests;

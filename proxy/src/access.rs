//! One request seen whole at its end: the access log line (`--access-log`; `tracing` target
//! `access`, one line per request with its id, API, model, key name, service class, prefill and decode
//! targets, status, outcome, tokens and durations) and the per-model and per-worker metrics
//! ([`crate::metrics::ServedMetrics`]).

use std::sync::Arc;
use std::time::Instant;

use infera_proto::types::{Api, ModelName, RequestId, Target};

use crate::metrics::ProxyMetrics;
use crate::targets::TargetList;
use crate::usage::{Usage, UsageTap};

/// The `model` label of a request: its model once control lists it (a client's unknown name
/// never becomes a label), else empty.
pub fn model_label(list: &TargetList, model: Option<&ModelName>) -> Arc<str> {
    match list.model_for(model) {
        Some(m) if list.serves(&m) => Arc::from(m.as_str()),
        _ => Arc::from(""),
    }
}

/// What is known of a request before its answer.
#[derive(Debug)]
pub struct Access {
    /// The request id (`x-request-id`).
    pub request_id: RequestId,
    /// The API it came in on.
    pub api: Api,
    /// Its model label ([`model_label`]).
    pub model: Arc<str>,
    /// The API key's name (with `--api-keys`).
    pub key: Option<Arc<str>>,
    /// The service class it named, or its key's (`None`: control's default class).
    pub class: Option<Arc<str>>,
    /// The prefill leg's target (PD).
    pub prefill: Option<Target>,
    /// The decode (or only) leg's target, once picked.
    pub decode: Option<Target>,
    /// The answer's HTTP status.
    pub status: u16,
    /// Input tokens as the proxy counted them (exact with a tokenizer, else estimated).
    pub input_tokens: u64,
    /// When the request arrived.
    pub started: Instant,
    /// Whether the access line is written (`--access-log`).
    pub log: bool,
}

/// What the relay saw of the answer.
#[derive(Debug)]
pub struct Seen {
    /// When its first body byte left.
    pub first_byte: Option<Instant>,
    /// What its usage is read from.
    pub usage: UsageTap,
}

impl Access {
    /// The request ended with `outcome` (`eof`, `cancelled`, `failed`, or `refused` for an answer
    /// that never reached a worker): writes the access line and, for an answer a worker gave,
    /// the tokens and the duration.
    pub fn end(self, seen: Option<&Seen>, outcome: &'static str, metrics: &ProxyMetrics) {
        let now = Instant::now();
        let usage = seen.map(|s| s.usage.usage()).unwrap_or_default();
        let Usage { prompt, completion } = usage;
        let prompt = prompt.unwrap_or(self.input_tokens);
        if seen.is_some() && !self.model.is_empty() {
            metrics.served.tokens(&self.model, prompt, completion);
            metrics.served.duration(self.api.as_str(), &self.model, (now - self.started).as_secs_f64());
        }
        if !self.log {
            return;
        }
        let ms = |t: Instant| (t - self.started).as_secs_f64() * 1e3;
        let target = |t: &Option<Target>| t.as_ref().map(|t| format!("{}/{}", t.worker, t.rank.0));
        tracing::info!(
            target: "access",
            request_id = self.request_id.as_str(),
            api = self.api.as_str(),
            model = &*self.model,
            key = self.key.as_deref(),
            class = self.class.as_deref(),
            prefill = target(&self.prefill),
            decode = target(&self.decode),
            status = self.status,
            outcome,
            prompt_tokens = prompt,
            completion_tokens = completion,
            ttft_ms = seen.and_then(|s| s.first_byte).map(ms),
            duration_ms = ms(now),
        );
    }
}

/// Marks an answer a worker gives, relayed: it writes its access line at its end.
#[derive(Clone, Copy, Debug)]
pub struct Relaying;

/// What is known of a generation request as it goes, for an answer that never reaches a worker.
#[derive(Debug)]
pub struct Trail {
    started: Instant,
    log: bool,
    /// The request id, once known.
    pub request_id: Option<RequestId>,
    /// Its model label ([`model_label`]), once known.
    pub model: Arc<str>,
    /// The API key's name.
    pub key: Option<Arc<str>>,
    /// The service class it named, or its key's.
    pub class: Option<Arc<str>>,
    /// Input tokens as the proxy counted them.
    pub input_tokens: u64,
}

impl Trail {
    /// A request that arrived at `started`; `log`: `--access-log`.
    pub fn new(started: Instant, log: bool) -> Self {
        Self { started, log, request_id: None, model: Arc::from(""), key: None, class: None, input_tokens: 0 }
    }

    /// Its record, as far as it is known, answered `status`.
    pub fn access(&self, api: Api, status: http::StatusCode) -> Access {
        Access {
            request_id: self.request_id.clone().unwrap_or_else(crate::facts::new_request_id),
            api,
            model: self.model.clone(),
            key: self.key.clone(),
            class: self.class.clone(),
            prefill: None,
            decode: None,
            status: status.as_u16(),
            input_tokens: self.input_tokens,
            started: self.started,
            log: self.log,
        }
    }

    /// Ends it as answered by the proxy alone (`refused`).
    pub fn refused(&self, api: Api, status: http::StatusCode, metrics: &ProxyMetrics) {
        self.access(api, status).end(None, "refused", metrics);
    }
}

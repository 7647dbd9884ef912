//! Each error kind a client saw in the chaos bench: whether a retry could have saved it, why it
//! happened, and which faults or outages the requests that met it fell in.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::chaos::events::Outages;
use crate::chaos::schedule::{Faulty, Schedule};

/// Whether a retry could have saved an error of this kind, and why it happened.
pub(super) fn explain(kind: &str) -> (Option<bool>, &'static str) {
    if kind.starts_with("HTTP 504 timeout") {
        (
            Some(true),
            "a non-streamed request on a stalled engine (decode-0 after K tokens, or prefill-0 before its KV): \
             no answer head within --request-timeout-ms, though each attempt has --attempt-timeout-ms: \
             every attempt stalled, or the retries did not fit in the request's deadline",
        )
    } else if kind.starts_with("SSE upstream_error (decode)") {
        (
            Some(false),
            "decode-0 cut its connection mid-stream (die_after_tokens) after tokens had reached the client: \
             a retry would send them twice; reported in the stream, then [DONE]",
        )
    } else if kind.starts_with("SSE upstream_error (prefill)") {
        (
            Some(true),
            "prefill-0 failed (a fail_next 500, or its connection cut) after the stream's first data frame \
             had reached the client (the proxy retries a prefill failure only before it): with die 1 the \
             decode had its KV and could have finished",
        )
    } else if kind.contains("from the engine: KV transfer failed on the prefill") {
        (
            Some(true),
            "prefill-0 failed (a fail_next 500, or it died before its KV) and the decode put the KV error in \
             its stream: an error event before any token is retried, so this one is the last attempt's \
             (every retry used) or came after tokens",
        )
    } else if kind.contains("from the engine: KV transfer timed out") {
        (
            Some(true),
            "prefill-0 stalled before its KV (stall_after_tokens 0): the decode waited \
             --sim-bootstrap-timeout-ms for the KV and put the error in its stream; retried before any token, \
             so this one is the last attempt's (every retry used)",
        )
    } else if kind.starts_with("HTTP 502") {
        (
            Some(true),
            "every attempt (1 + --retries) failed before the first byte, though prefill-1 and decode-1 were \
             healthy: each retry passes only the failed leg's target by, and a decode 500 is blamed on the \
             prefill only when the prefill's failure arrives within 250 ms (the attempts each faulty sim \
             logged for the request are below)",
        )
    } else if kind.starts_with("HTTP 503") {
        (Some(true), "no target could be picked")
    } else {
        (None, "not explained")
    }
}

/// Whether engine log entry `entry` is one of request `rid`'s attempts (the engines know retry n
/// as `{rid}-retry{n}`).
pub(super) fn attempt_of(entry: &Value, rid: &str) -> bool {
    entry["rid"].as_str().is_some_and(|id| {
        id == rid || id.strip_prefix(rid).and_then(|rest| rest.strip_prefix("-retry")).is_some()
    })
}

/// Whether hung request `rid` is held by a stalled engine: the faulty decode's log has it stopped
/// at a stall's token count, or the faulty prefill's has it with no token, ended by the client.
pub(super) fn held_by_a_stall(rid: &str, sched: &Schedule, logs: &[Vec<Value>; 2]) -> bool {
    let ended_by_client =
        |r: &Value| ["client_gone", "aborted"].contains(&r["outcome"].as_str().unwrap_or(""));
    let tokens = |r: &Value| r["completion_tokens"].as_u64().unwrap_or(u64::MAX);
    let decode = logs[0]
        .iter()
        .filter(|r| attempt_of(r, rid))
        .any(|r| ended_by_client(r) && sched.decode_stall_tokens.iter().any(|&k| u64::from(k) == tokens(r)));
    let prefill_stalls =
        sched.faults.iter().any(|s| s.sim == Faulty::Prefill && s.body["stall_after_tokens"] == 0);
    let prefill = prefill_stalls
        && logs[1].iter().filter(|r| attempt_of(r, rid)).any(|r| ended_by_client(r) && tokens(r) == 0);
    decode || prefill
}

/// Where in the run faults and outages were, in requests issued: `[start − concurrency, end]`
/// (the requests in flight when one began may meet it too; a burst of 500s lasts until the sim's
/// next step or a tenth of the run), with what it was.
pub(super) fn windows(
    sched: &Schedule,
    outages: &Outages,
    concurrency: usize,
    cap: usize,
) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (k, step) in sched.faults.iter().enumerate() {
        let sim = match step.sim {
            Faulty::Decode => "decode-0",
            Faulty::Prefill => "prefill-0",
        };
        let Some((key, value)) = step.body.as_object().and_then(|o| o.iter().next()) else { continue };
        if value.is_null() {
            continue;
        }
        // A burst of 500s lasts until that many requests reached the sim, which may be long
        // after (its targets ejected meanwhile): up to the sim's next step, at most `cap` later.
        let next = |same_key: bool| {
            sched.faults[k + 1..]
                .iter()
                .find(|s| s.sim == step.sim && (!same_key || s.body[key.as_str()].is_null()))
                .map_or(usize::MAX, |s| s.at)
        };
        let end = if key == "fail_next" { next(false).min(step.at + cap) } else { next(true) };
        out.push((step.at.saturating_sub(concurrency), end, format!("{sim} {key} {value}")));
    }
    for (start, end, what) in &outages.spans {
        out.push((start.saturating_sub(concurrency), *end, (*what).to_owned()));
    }
    out
}

/// What request `i` met: the windows it falls in.
pub(super) fn during(i: usize, windows: &[(usize, usize, String)]) -> String {
    let hits: Vec<&str> = windows.iter().filter(|w| w.0 <= i && i <= w.1).map(|w| w.2.as_str()).collect();
    if hits.is_empty() { "no fault or outage".to_owned() } else { hits.join(" + ") }
}

/// The requests that ended with one error kind.
#[derive(Debug)]
pub(super) struct ErrorKind {
    pub(super) n: usize,
    /// The first one's message.
    pub(super) message: String,
    /// Streams with no event before the error event.
    pub(super) without_content: usize,
    /// What they met (fault windows, outages), counted.
    pub(super) during: BTreeMap<String, usize>,
    /// The first few request ids.
    pub(super) rids: Vec<String>,
}

impl ErrorKind {
    pub(super) fn new(message: &str) -> Self {
        Self {
            n: 0,
            message: message.to_owned(),
            without_content: 0,
            during: BTreeMap::new(),
            rids: Vec::new(),
        }
    }
}

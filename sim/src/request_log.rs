//! `GET /sim/requests`: the data-plane requests received, newest last, bounded. Tests read it
//! to see what each leg carried (room, ranks, bootstrap address, tracing headers) and how it
//! ended.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;

/// How many entries are kept.
pub const CAPACITY: usize = 10_000;

/// How a request ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Still in flight.
    #[default]
    Running,
    /// Completed.
    Ok,
    /// Rejected or failed (including injected faults).
    Failed,
    /// Aborted by `/abort_request` or shutdown.
    Aborted,
    /// The client went away first.
    ClientGone,
}

/// One request as received and as it ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Entry {
    /// Request id.
    pub rid: String,
    /// Route.
    pub path: String,
    /// `bootstrap_room`.
    pub room: Option<u64>,
    /// `routed_dp_rank` (or its aliases) as received.
    pub routed_dp_rank: Option<i64>,
    /// `disagg_prefill_dp_rank` as received.
    pub disagg_prefill_dp_rank: Option<i64>,
    /// The rank the request ran on.
    pub dp_rank_used: Option<u32>,
    /// `bootstrap_host` as received.
    pub bootstrap_host: Option<String>,
    /// `bootstrap_port` as received (`null` = the prefill's own).
    pub bootstrap_port: Option<u16>,
    /// Prompt length.
    pub prompt_tokens: u32,
    /// Prompt tokens found in the prefix cache (on a PD decode: the prefill's count).
    pub cached_tokens: u32,
    /// Tokens sent.
    pub completion_tokens: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Milliseconds from its receipt to its end, as the engine saw them (wall time, like
    /// SGLang's `e2e_latency`); `None` while it runs.
    pub engine_ms: Option<f64>,
    /// The `traceparent` header as received.
    pub traceparent: Option<String>,
    /// The `tracestate` header as received.
    pub tracestate: Option<String>,
    /// The `x-request-id` header as received.
    pub x_request_id: Option<String>,
    /// Whether an `Authorization` header came with it (its value is never logged).
    pub authorization: bool,
}

/// A handle on an entry, for the final update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seq(u64);

/// The bounded log.
#[derive(Debug, Default)]
pub struct RequestLog(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    first: u64,
    entries: VecDeque<Entry>,
}

impl RequestLog {
    /// Appends an entry (dropping the oldest beyond [`CAPACITY`]).
    pub fn push(&self, entry: Entry) -> Seq {
        let mut log = self.0.lock().unwrap();
        if log.entries.len() == CAPACITY {
            log.entries.pop_front();
            log.first += 1;
        }
        log.entries.push_back(entry);
        Seq(log.first + log.entries.len() as u64 - 1)
    }

    /// Updates an entry if it is still kept.
    pub fn update(&self, seq: Seq, f: impl FnOnce(&mut Entry)) {
        let mut log = self.0.lock().unwrap();
        let Some(i) = seq.0.checked_sub(log.first) else { return };
        if let Some(e) = log.entries.get_mut(i as usize) {
            f(e);
        }
    }

    /// Every entry kept, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        self.0.lock().unwrap().entries.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_bounded_and_updates_by_seq() {
        let log = RequestLog::default();
        let first = log.push(Entry { rid: "a".into(), ..Entry::default() });
        for i in 0..CAPACITY {
            let seq = log.push(Entry { rid: i.to_string(), ..Entry::default() });
            log.update(seq, |e| e.outcome = Outcome::Ok);
        }
        log.update(first, |e| e.rid = "gone".into());
        let entries = log.entries();
        assert_eq!(entries.len(), CAPACITY);
        assert_eq!(entries[0].rid, "0");
        assert!(entries.iter().all(|e| e.outcome == Outcome::Ok));
    }
}

//! Trace readers: Mooncake JSONL and the agentic (kv-cache-tester "Weka") session JSONL, plain
//! or gzip, read one line at a time (the agentic files decompress to ~0.5 GB; they are never
//! held whole).
//!
//! Both formats come out as [`Session`]s: a Mooncake line is a session of one turn, an agentic
//! line a session of its model requests in order. Block ids are namespaced by
//! [`BlockId::scope`]: 0 for global ids (Mooncake, `hash_id_scope: "global"`), the session
//! index + 1 for `"local"` ones, so unrelated v8 sessions never appear to share a prefix.
//!
//! **Sub-agents.** A `type: "subagent"` marker becomes a [`SubAgent`]: a session of its inner
//! requests (in the parent's id scope, as upstream), started before the parent's next turn.
//! Consecutive markers form one group that runs concurrently, and the parent waits for the
//! whole group (kv-cache-tester's replay). In the raw data a marker's `t` is the sub-agent's
//! *end* (`t − duration_ms` is right after the parent's previous response), so the parent's
//! next `think_time` spans the sub-agents' run: that turn's think time here is the trace's
//! less the group's longest `duration_ms`, at least 0. Markers nested inside a sub-agent are
//! dropped (none occur in the published sets).
//!
//! - [`source`]: `--trace` — a file, or a built-in trace ([`synthetic`]) read the same way.

mod source;
pub(crate) mod synthetic;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;
pub(crate) use source::{Builtin, Source};

/// Tokens per Mooncake hash block.
pub(crate) const MOONCAKE_BLOCK_TOKENS: u32 = 512;

/// Which format a trace is in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Decided from the first line: an object with `requests` is agentic, else Mooncake.
    Auto,
    /// `{"timestamp", "input_length", "output_length", "hash_ids"}` per line.
    Mooncake,
    /// One session per line: `{"id", "block_size", "hash_id_scope", "requests": [...]}`.
    Agentic,
}

/// A prefix block: equal ids (in equal scopes) mean equal content up to and including it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BlockId {
    pub(crate) scope: u64,
    pub(crate) id: u64,
}

/// One model request of a session.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Turn {
    /// Arrival in trace milliseconds (Mooncake: since the trace start; agentic: since the
    /// session's first request).
    pub(crate) at_ms: f64,
    /// Client think time before this request, in trace seconds (0 for Mooncake).
    pub(crate) think_s: f64,
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
    pub(crate) blocks: Vec<BlockId>,
}

/// A sequence of turns replayed one after another (closed loop) or one turn (Mooncake).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Session {
    /// Position in the trace (0-based line of a session); a sub-agent's is its parent's with
    /// its ordinal in the high bits, so its filler text is its own.
    pub(crate) index: u64,
    pub(crate) name: String,
    /// Tokens per hash block.
    pub(crate) block_tokens: u32,
    pub(crate) turns: Vec<Turn>,
    /// Sub-agents, in trace order (never nested).
    pub(crate) subagents: Vec<SubAgent>,
}

/// A sub-agent: its own session, run before the parent's turn `before_turn`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SubAgent {
    /// The parent's turn it precedes (`turns.len()`: after the last one).
    pub(crate) before_turn: usize,
    pub(crate) session: std::sync::Arc<Session>,
}

/// Why a trace cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TraceError {
    #[error("cannot read the trace: {0}")]
    Io(#[from] std::io::Error),
    #[error("line {line}: not JSON: {source}")]
    Json { line: usize, source: serde_json::Error },
    #[error("line {line}: {what}")]
    Field { line: usize, what: String },
    #[error("{name} is not a {wanted:?} trace")]
    Builtin { name: String, wanted: Format },
}

/// Sessions from a trace, parsed as they are read.
pub(crate) struct TraceReader {
    lines: Box<dyn BufRead + Send>,
    format: Format,
    line: usize,
    sessions: u64,
    buf: String,
}

/// Opens a trace file (`.gz` is decompressed on the fly).
pub(crate) fn open(path: &Path, format: Format) -> Result<TraceReader, TraceError> {
    let file = File::open(path)?;
    let lines: Box<dyn BufRead + Send> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::GzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    Ok(TraceReader::new(lines, format))
}

impl TraceReader {
    pub(crate) fn new(lines: Box<dyn BufRead + Send>, format: Format) -> Self {
        Self { lines, format, line: 0, sessions: 0, buf: String::new() }
    }

    fn next_session(&mut self) -> Result<Option<Session>, TraceError> {
        loop {
            self.buf.clear();
            if self.lines.read_line(&mut self.buf)? == 0 {
                return Ok(None);
            }
            self.line += 1;
            if self.buf.trim().is_empty() {
                continue;
            }
            let line = self.line;
            let v: Value =
                serde_json::from_str(&self.buf).map_err(|source| TraceError::Json { line, source })?;
            if self.format == Format::Auto {
                self.format = if v.get("requests").is_some() { Format::Agentic } else { Format::Mooncake };
            }
            let index = self.sessions;
            self.sessions += 1;
            return match self.format {
                Format::Agentic => agentic(&v, index, line).map(Some),
                _ => mooncake(&v, index, line).map(Some),
            };
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Session, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_session().transpose()
    }
}

fn field<'a>(v: &'a Value, name: &str, line: usize) -> Result<&'a Value, TraceError> {
    v.get(name).ok_or_else(|| TraceError::Field { line, what: format!("no `{name}`") })
}

fn num(v: &Value, name: &str, line: usize) -> Result<f64, TraceError> {
    field(v, name, line)?
        .as_f64()
        .ok_or_else(|| TraceError::Field { line, what: format!("`{name}` is not a number") })
}

fn tokens(v: &Value, name: &str, line: usize) -> Result<u32, TraceError> {
    let n = num(v, name, line)?;
    if !(0.0..=f64::from(u32::MAX)).contains(&n) {
        return Err(TraceError::Field { line, what: format!("`{name}` out of range: {n}") });
    }
    Ok(n as u32)
}

fn blocks(v: &Value, scope: u64, line: usize) -> Result<Vec<BlockId>, TraceError> {
    field(v, "hash_ids", line)?
        .as_array()
        .ok_or_else(|| TraceError::Field { line, what: "`hash_ids` is not an array".into() })?
        .iter()
        .map(|id| {
            id.as_u64()
                .map(|id| BlockId { scope, id })
                .ok_or_else(|| TraceError::Field { line, what: format!("bad hash id {id}") })
        })
        .collect()
}

fn mooncake(v: &Value, index: u64, line: usize) -> Result<Session, TraceError> {
    let turn = Turn {
        at_ms: num(v, "timestamp", line)?,
        think_s: 0.0,
        input_tokens: tokens(v, "input_length", line)?,
        output_tokens: tokens(v, "output_length", line)?,
        blocks: blocks(v, 0, line)?,
    };
    Ok(Session {
        index,
        name: format!("line-{line}"),
        block_tokens: MOONCAKE_BLOCK_TOKENS,
        turns: vec![turn],
        subagents: Vec::new(),
    })
}

fn agentic(v: &Value, index: u64, line: usize) -> Result<Session, TraceError> {
    let local = v.get("hash_id_scope").and_then(Value::as_str) == Some("local");
    let scope = if local { index + 1 } else { 0 };
    let block_tokens = v.get("block_size").and_then(Value::as_u64).unwrap_or(64).clamp(1, 1 << 20) as u32;
    let name = v.get("id").and_then(Value::as_str).unwrap_or("?").to_owned();
    let mut turns = Vec::new();
    let mut subagents = Vec::new();
    // The longest trace duration of the sub-agent group since the last turn, in seconds.
    let mut group_s: Option<f64> = None;
    for r in requests(v, line)? {
        if r.get("type").and_then(Value::as_str) == Some("subagent") {
            let ordinal = subagents.len() as u64 + 1;
            let agent =
                r.get("agent_id").and_then(Value::as_str).map_or_else(|| ordinal.to_string(), str::to_owned);
            let mut inner = Vec::new();
            for q in requests(r, line)? {
                if q.get("type").and_then(Value::as_str) != Some("subagent") {
                    inner.push(turn(q, scope, line)?);
                }
            }
            let session = Session {
                index: index | (ordinal << 40),
                name: format!("{name}/{agent}"),
                block_tokens,
                turns: inner,
                subagents: Vec::new(),
            };
            subagents.push(SubAgent { before_turn: turns.len(), session: std::sync::Arc::new(session) });
            let duration_s = r.get("duration_ms").and_then(Value::as_f64).unwrap_or(0.0).max(0.0) / 1e3;
            group_s = Some(group_s.unwrap_or(0.0).max(duration_s));
            continue;
        }
        let mut t = turn(r, scope, line)?;
        if let Some(spent) = group_s.take() {
            t.think_s = (t.think_s - spent).max(0.0);
        }
        turns.push(t);
    }
    Ok(Session { index, name, block_tokens, turns, subagents })
}

fn requests(v: &Value, line: usize) -> Result<&Vec<Value>, TraceError> {
    field(v, "requests", line)?
        .as_array()
        .ok_or_else(|| TraceError::Field { line, what: "`requests` is not an array".into() })
}

fn turn(r: &Value, scope: u64, line: usize) -> Result<Turn, TraceError> {
    Ok(Turn {
        at_ms: num(r, "t", line)? * 1e3,
        think_s: r.get("think_time").and_then(Value::as_f64).unwrap_or(0.0).max(0.0),
        input_tokens: tokens(r, "in", line)?,
        output_tokens: tokens(r, "out", line)?,
        blocks: blocks(r, scope, line)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, format: Format) -> Vec<Session> {
        let lines = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        TraceReader::new(lines, format).collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn mooncake_lines_are_one_turn_sessions() {
        let s = read(
            "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n\n\
             {\"timestamp\": 3000, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [0]}\n",
            Format::Auto,
        );
        assert_eq!(s.len(), 2);
        assert_eq!((s[1].index, s[1].turns[0].at_ms, s[1].block_tokens), (1, 3000.0, 512));
        assert_eq!(s[0].turns[0].blocks, vec![BlockId { scope: 0, id: 0 }, BlockId { scope: 0, id: 1 }]);
    }

    #[test]
    fn agentic_local_ids_are_namespaced() {
        let line = |id: &str, scope: &str| {
            format!(
                "{{\"id\":\"{id}\",\"block_size\":64,\"hash_id_scope\":\"{scope}\",\"requests\":[\
                 {{\"t\":0,\"type\":\"s\",\"in\":130,\"out\":7,\"hash_ids\":[1,2],\"think_time\":0}},\
                 {{\"t\":9,\"type\":\"n\",\"in\":200,\"out\":3,\"hash_ids\":[1,2,3],\"think_time\":4.5}}]}}\n"
            )
        };
        let s = read(&(line("trace_0001", "local") + &line("trace_0002", "local")), Format::Auto);
        assert_eq!(s[0].turns.len(), 2);
        assert_eq!((s[0].turns[1].at_ms, s[0].turns[1].think_s), (9000.0, 4.5));
        assert_ne!(s[0].turns[0].blocks[0], s[1].turns[0].blocks[0], "local ids collide across sessions");
        let g = read(&(line("a", "global") + &line("b", "global")), Format::Agentic);
        assert_eq!(g[0].turns[0].blocks[0], g[1].turns[0].blocks[0]);
    }

    #[test]
    fn subagent_markers_become_concurrent_groups_before_the_next_turn() {
        // As in the data: the parent's turn at 0 ends at ~7 s; two sub-agents run from ~8 s and
        // end at their markers' `t`; the parent's next turn comes 12 s after the longer one.
        let text = "{\"id\":\"trace_0003\",\"block_size\":64,\"hash_id_scope\":\"local\",\"requests\":[\
            {\"t\":0,\"type\":\"n\",\"in\":64,\"out\":5,\"hash_ids\":[1],\"think_time\":0},\
            {\"t\":108,\"type\":\"subagent\",\"agent_id\":\"a\",\"duration_ms\":100000,\"requests\":[\
               {\"t\":0,\"type\":\"s\",\"in\":128,\"out\":4,\"hash_ids\":[1,7],\"think_time\":0},\
               {\"t\":6,\"type\":\"s\",\"in\":192,\"out\":4,\"hash_ids\":[1,7,8],\"think_time\":3}]},\
            {\"t\":158,\"type\":\"subagent\",\"duration_ms\":150000,\"requests\":[\
               {\"t\":0,\"type\":\"s\",\"in\":64,\"out\":2,\"hash_ids\":[1],\"think_time\":0}]},\
            {\"t\":170,\"type\":\"n\",\"in\":256,\"out\":9,\"hash_ids\":[1,2,3,4],\"think_time\":163},\
            {\"t\":180,\"type\":\"subagent\",\"duration_ms\":1000,\"requests\":[]}]}\n";
        let s = &read(text, Format::Agentic)[0];
        assert_eq!(s.turns.len(), 2);
        assert!((s.turns[1].think_s - 13.0).abs() < 1e-9, "163 s less the group's 150 s");
        let groups: Vec<_> = s.subagents.iter().map(|a| (a.before_turn, a.session.turns.len())).collect();
        assert_eq!(groups, vec![(1, 2), (1, 1), (2, 0)]);
        let a = &s.subagents[0].session;
        assert_eq!((a.name.as_str(), a.turns[1].think_s), ("trace_0003/a", 3.0));
        assert_eq!(a.turns[0].blocks[0], s.turns[0].blocks[0], "sub-agents share the parent's id scope");
        assert_ne!(a.index, s.index);
        assert_ne!(a.index, s.subagents[1].session.index);
    }

    #[test]
    fn a_bad_line_is_a_typed_error() {
        let lines = Box::new(std::io::Cursor::new(b"{\"timestamp\": 0}\n".to_vec()));
        let err = TraceReader::new(lines, Format::Mooncake).next().unwrap().unwrap_err();
        assert!(matches!(err, TraceError::Field { line: 1, .. }), "{err}");
    }
}

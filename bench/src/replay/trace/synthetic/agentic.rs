//! The agentic ("Weka" v8-shaped) synthetic trace ([`super`]): coding-agent sessions whose
//! prompt is the whole conversation so far. A session opens with tools, a system prompt and a
//! task (~20k tokens); each later request appends the previous answer and a tool result, so
//! contexts only grow, and comes a think time after the previous answer (a tool run of seconds,
//! now and then a person's minutes). Now and then the last few blocks are rewritten (an edited
//! reminder near the end), so later ids diverge there. Sessions are made one at a time as they
//! are read; each is one line of the v8 format.

use std::fmt::Write as _;

use rand::Rng;

use super::{log_normal, log_normal_s};

/// Tokens per hash block (the format's `block_size`).
pub(crate) const BLOCK_TOKENS: u32 = 64;
/// Chance that a request rewrites up to 4 of the previous prompt's last whole blocks.
const TAIL_REWRITE: f64 = 0.05;
/// The model named in every request.
const MODEL: &str = "synthetic";

/// One model request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Request {
    /// Seconds since the session's first request (whole seconds, as in v8).
    pub(crate) t: f64,
    pub(crate) streaming: bool,
    pub(crate) input: u32,
    pub(crate) output: u32,
    /// One per whole 64-token block of the prompt, prefix-chained, from 1 in each session.
    pub(crate) hash_ids: Vec<u64>,
    /// Seconds the answer took.
    pub(crate) api_time: f64,
    /// Seconds between the previous answer and this request (0 for the first).
    pub(crate) think_time: f64,
}

/// One session (one trace line).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) tool_tokens: u32,
    pub(crate) system_tokens: u32,
    pub(crate) requests: Vec<Request>,
}

impl Session {
    /// The session as a trace line (no newline): compact JSON in the v8 layout.
    pub(crate) fn line(&self) -> String {
        let mut s = format!(
            "{{\"id\":\"{}\",\"models\":[\"{MODEL}\"],\"block_size\":{BLOCK_TOKENS},\"hash_id_scope\":\"local\",\
             \"tool_tokens\":{},\"system_tokens\":{},\"requests\":[",
            self.id, self.tool_tokens, self.system_tokens
        );
        for (i, r) in self.requests.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"t\":{},\"type\":\"{}\",\"model\":\"{MODEL}\",\"in\":{},\"out\":{},\"hash_ids\":[",
                if i == 0 { "" } else { "," },
                r.t,
                if r.streaming { "s" } else { "n" },
                r.input,
                r.output
            );
            for (k, id) in r.hash_ids.iter().enumerate() {
                let _ = write!(s, "{}{id}", if k == 0 { "" } else { "," });
            }
            let stop = if i + 1 == self.requests.len() { "end_turn" } else { "tool_use" };
            let _ = write!(
                s,
                "],\"stop\":\"{stop}\",\"api_time\":{},\"think_time\":{}}}",
                r.api_time, r.think_time
            );
        }
        s + "]}"
    }
}

/// `count` sessions drawn from `rng`, one at a time.
#[derive(Debug)]
pub(crate) struct Sessions<R> {
    rng: R,
    made: usize,
    count: usize,
}

impl<R: Rng> Sessions<R> {
    pub(crate) fn new(rng: R, count: usize) -> Self {
        Self { rng, made: 0, count }
    }
}

impl<R: Rng> Iterator for Sessions<R> {
    type Item = Session;

    fn next(&mut self) -> Option<Session> {
        if self.made == self.count {
            return None;
        }
        self.made += 1;
        Some(session(&mut self.rng, format!("synthetic_{:04}", self.made)))
    }
}

/// Tenths of a second.
fn tenths(s: f64) -> f64 {
    (s * 10.0).round() / 10.0
}

fn session(rng: &mut impl Rng, id: String) -> Session {
    let turns = rng.random_range(10..=60);
    let tool_tokens = rng.random_range(8_000..=16_000);
    let system_tokens = rng.random_range(2_000..=6_000);
    let mut context = log_normal(rng, 20_000.0, 0.5, tool_tokens + system_tokens + 200, 120_000);
    let (mut chain, mut next_id) = (Vec::new(), 1u64);
    let (mut clock, mut last_api) = (0.0, 0.0);
    let mut requests = Vec::with_capacity(turns);
    for k in 0..turns {
        let think_time = if k == 0 {
            0.0
        } else if rng.random_bool(0.65) {
            tenths(log_normal_s(rng, 2.0, 1.0, 600.0))
        } else {
            tenths(log_normal_s(rng, 45.0, 1.5, 3_600.0))
        };
        clock += last_api + think_time;
        if k > 0 && rng.random_bool(TAIL_REWRITE) {
            let keep = chain.len().saturating_sub(rng.random_range(1..=4));
            chain.truncate(keep);
        }
        let whole = (context / BLOCK_TOKENS) as usize;
        while chain.len() < whole {
            chain.push(next_id);
            next_id += 1;
        }
        let output = log_normal(rng, 200.0, 1.1, 1, 16_000);
        // Prefill of the uncached tail and ~20 ms a token of decode, with some spread.
        let api_time = tenths(1.0 + f64::from(output) * 0.02 * rng.random_range(0.7..1.4));
        requests.push(Request {
            t: clock.round(),
            streaming: rng.random_bool(0.17),
            input: context,
            output,
            hash_ids: chain.clone(),
            api_time,
            think_time,
        });
        last_api = api_time;
        let tool_result = log_normal(rng, 1_200.0, 1.2, 20, 40_000);
        context = context.saturating_add(output + tool_result);
    }
    Session { id, tool_tokens, system_tokens, requests }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::SeedableRng as _;
    use rand::rngs::StdRng;

    use super::*;
    use crate::replay::trace::{BlockId, Format, TraceReader};

    fn sessions(n: usize) -> Vec<Session> {
        Sessions::new(StdRng::seed_from_u64(super::super::SEED), n).collect()
    }

    #[test]
    fn sessions_keep_the_format_invariants() {
        let all = sessions(24);
        assert_eq!(all.len(), 24);
        for s in &all {
            assert!((10..=60).contains(&s.requests.len()), "{}", s.id);
            let mut at_depth: HashMap<u64, usize> = HashMap::new();
            for (i, r) in s.requests.iter().enumerate() {
                assert_eq!(r.hash_ids.len(), (r.input / 64) as usize, "{} request {i}", s.id);
                if i > 0 {
                    let prev = &s.requests[i - 1];
                    assert!(r.input >= prev.input, "{} request {i}: the context shrank", s.id);
                    assert!(r.t >= prev.t && r.think_time >= 0.0, "{} request {i}", s.id);
                } else {
                    assert_eq!((r.t, r.think_time), (0.0, 0.0));
                }
                // Local scope: ids from 1; prefix-chained: an id keeps its depth.
                for (depth, id) in r.hash_ids.iter().enumerate() {
                    assert!(*id >= 1);
                    assert_eq!(*at_depth.entry(*id).or_insert(depth), depth, "{}: id {id} moved", s.id);
                }
            }
            assert_eq!(s.requests[0].hash_ids[0], 1, "{}: local ids restart at 1", s.id);
        }
    }

    #[test]
    fn the_shape_is_the_agentic_traces_roughly() {
        let all = sessions(64);
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let requests: Vec<&Request> = all.iter().flat_map(|s| &s.requests).collect();
        let first = median(all.iter().map(|s| f64::from(s.requests[0].input)).collect());
        let output = median(requests.iter().map(|r| f64::from(r.output)).collect());
        let think = median(all.iter().flat_map(|s| &s.requests[1..]).map(|r| r.think_time).collect());
        assert!((16_000.0..26_000.0).contains(&first), "first input median {first}");
        assert!((160.0..250.0).contains(&output), "output median {output}");
        assert!((1.0..30.0).contains(&think), "think median {think}");
        // Within-session prefix reuse is high, as in the real sessions (0.96).
        let (mut reused, mut total) = (0usize, 0usize);
        for s in &all {
            let mut seen = std::collections::HashSet::new();
            for r in &s.requests {
                reused += r.hash_ids.iter().take_while(|id| seen.contains(*id)).count();
                total += r.hash_ids.len();
                seen.extend(r.hash_ids.iter().copied());
            }
        }
        let ratio = reused as f64 / total as f64;
        assert!((0.9..0.995).contains(&ratio), "within-session reuse {ratio}");
    }

    #[test]
    fn the_reader_reads_the_lines_as_the_sessions_in_local_scope() {
        let all = sessions(3);
        let text: String = all.iter().map(|s| s.line() + "\n").collect();
        let lines = Box::new(std::io::Cursor::new(text.into_bytes()));
        let read: Vec<_> = TraceReader::new(lines, Format::Auto).collect::<Result<_, _>>().unwrap();
        assert_eq!(read.len(), 3);
        for (s, r) in all.iter().zip(&read) {
            assert_eq!(
                (r.name.as_str(), r.block_tokens, r.turns.len()),
                (s.id.as_str(), 64, s.requests.len())
            );
            assert!(r.subagents.is_empty());
            for (q, turn) in s.requests.iter().zip(&r.turns) {
                assert_eq!((turn.at_ms, turn.think_s), (q.t * 1e3, q.think_time));
                assert_eq!((turn.input_tokens, turn.output_tokens), (q.input, q.output));
                let scope = r.index + 1;
                let want: Vec<BlockId> = q.hash_ids.iter().map(|&id| BlockId { scope, id }).collect();
                assert_eq!(turn.blocks, want);
            }
        }
        assert_ne!(read[0].turns[0].blocks[0], read[1].turns[0].blocks[0], "local ids collide");
    }
}

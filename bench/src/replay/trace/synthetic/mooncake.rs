//! The Mooncake-shaped synthetic trace ([`super`]): conversations arrive as a Poisson process,
//! each sends a first request and, with probability [`CONTINUE`] after each answer, a next one
//! that resends the whole conversation so far plus a new message. All requests start with the
//! system-prompt block 0; a share of conversations then share one of a few longer prefixes
//! (a tool set, a document). Arrivals are quantised to 3-s ticks, as in the conversation trace.

use std::collections::HashMap;
use std::fmt::Write as _;

use rand::Rng;

use super::log_normal;
use crate::replay::trace::MOONCAKE_BLOCK_TOKENS;

/// Mean arrivals per second (the conversation trace: 3.40).
const RATE_PER_S: f64 = 3.4;
/// Timestamps are multiples of this (the conversation trace's ticks).
const TICK_MS: f64 = 3_000.0;
/// Chance that a conversation sends another request after each answer.
const CONTINUE: f64 = 0.4;
/// Shared prefixes after block 0, and the share of conversations that start with one.
const SHARED_PREFIXES: usize = 8;
const SHARED_PREFIX_SHARE: f64 = 0.15;
/// The longest prompt; a conversation that would outgrow it ends.
const MAX_INPUT: u32 = 128 * 1_024;

/// One line of a Mooncake trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) timestamp_ms: u64,
    pub(crate) input_length: u32,
    pub(crate) output_length: u32,
    pub(crate) hash_ids: Vec<u64>,
}

impl Record {
    /// The record as a trace line (no newline), fields in the published files' order.
    pub(crate) fn line(&self) -> String {
        let mut s = format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [",
            self.timestamp_ms, self.input_length, self.output_length
        );
        for (i, id) in self.hash_ids.iter().enumerate() {
            let _ = write!(s, "{}{id}", if i == 0 { "" } else { ", " });
        }
        s + "]}"
    }
}

/// `requests` records in timestamp order, the first at 0.
pub(crate) fn generate(rng: &mut impl Rng, requests: usize) -> Vec<Record> {
    let mut ids = Ids { next: 1 };
    let prefixes: Vec<Vec<u64>> = (0..SHARED_PREFIXES).map(|_| ids.fresh(rng.random_range(2..=12))).collect();
    // Conversations start until well past the time `requests` arrivals take, so the earliest
    // `requests` requests are all there.
    let horizon_ms = 1.5e3 * requests as f64 / RATE_PER_S;
    let mut all: Vec<(f64, Record)> = Vec::new();
    let mut start_ms = 0.0;
    while start_ms <= horizon_ms || all.len() < requests {
        conversation(rng, start_ms, &prefixes, &mut ids, &mut all);
        // Exponential gaps between conversation starts (the continuations make up the rest).
        let u: f64 = 1.0 - rng.random::<f64>();
        start_ms += -u.ln() * 1e3 / (RATE_PER_S * (1.0 - CONTINUE));
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    all.truncate(requests);
    // Ids numbered in order of first appearance, as the published (remapped) ones are.
    let mut renumber = HashMap::new();
    all.into_iter()
        .map(|(_, mut r)| {
            for id in &mut r.hash_ids {
                let n = renumber.len() as u64;
                *id = *renumber.entry(*id).or_insert(n);
            }
            r
        })
        .collect()
}

/// Fresh block ids (0 is the system prompt's).
struct Ids {
    next: u64,
}

impl Ids {
    fn fresh(&mut self, n: usize) -> Vec<u64> {
        let ids = (self.next..self.next + n as u64).collect();
        self.next += n as u64;
        ids
    }
}

/// One conversation's requests, starting at `start_ms`.
fn conversation(
    rng: &mut impl Rng,
    start_ms: f64,
    prefixes: &[Vec<u64>],
    ids: &mut Ids,
    out: &mut Vec<(f64, Record)>,
) {
    let block = MOONCAKE_BLOCK_TOKENS;
    let mut chain = vec![0];
    if rng.random_bool(SHARED_PREFIX_SHARE) {
        chain.extend(&prefixes[rng.random_range(0..prefixes.len())]);
    }
    // The shared blocks are whole; the prompt goes on past them.
    let shared = chain.len() as u32 * block;
    let mut input = log_normal(rng, 5_500.0, 1.15, 600, MAX_INPUT).max(shared + 64);
    let mut at_ms = start_ms;
    loop {
        let output = log_normal(rng, 350.0, 0.42, 1, 2_000);
        let blocks = input.div_ceil(block) as usize;
        let fresh = ids.fresh(blocks - chain.len());
        chain.extend(fresh);
        let record =
            Record { timestamp_ms: 0, input_length: input, output_length: output, hash_ids: chain.clone() };
        out.push((at_ms, Record { timestamp_ms: ((at_ms / TICK_MS).floor() * TICK_MS) as u64, ..record }));
        let message = log_normal(rng, 600.0, 1.2, 16, 20_000);
        let next = input + output + message;
        if next > MAX_INPUT || !rng.random_bool(CONTINUE) {
            return;
        }
        // The last block was partial: with the answer and the new message appended it is other
        // content, so only the whole blocks carry over.
        chain.truncate((input / block) as usize);
        input = next;
        // The answer streams (~30 ms a token), then the user reads and writes.
        at_ms += f64::from(output) * 30.0 + rng.random_range(15_000.0..120_000.0);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rand::SeedableRng as _;
    use rand::rngs::StdRng;

    use super::*;
    use crate::replay::trace::{Format, TraceReader};

    fn trace() -> Vec<Record> {
        generate(&mut StdRng::seed_from_u64(super::super::SEED), super::super::MOONCAKE_REQUESTS)
    }

    #[test]
    fn records_keep_the_format_invariants() {
        let t = trace();
        assert_eq!(t.len(), 1_000);
        assert_eq!(t[0].timestamp_ms, 0);
        let mut seen_at: HashMap<u64, usize> = HashMap::new();
        let mut next_new = 0;
        for (i, r) in t.iter().enumerate() {
            assert_eq!(r.hash_ids.len(), r.input_length.div_ceil(512) as usize, "record {i}");
            assert_eq!(r.hash_ids[0], 0, "record {i} starts with the system prompt");
            assert!(r.timestamp_ms % 3_000 == 0 && (i == 0 || r.timestamp_ms >= t[i - 1].timestamp_ms));
            assert!(r.output_length >= 1);
            for (pos, id) in r.hash_ids.iter().enumerate() {
                // Prefix-chained: an id always sits at the same depth, and fresh ids come in
                // order of first appearance.
                assert_eq!(*seen_at.entry(*id).or_insert(pos), pos, "record {i}: id {id} moved");
                if *id == next_new {
                    next_new += 1;
                }
                assert!(*id < next_new, "record {i}: id {id} out of first-appearance order");
            }
        }
        // Equal ids at a depth mean equal prefixes: the id before a repeated id is repeated too.
        let mut parent: HashMap<u64, u64> = HashMap::new();
        for r in &t {
            for w in r.hash_ids.windows(2) {
                assert_eq!(*parent.entry(w[1]).or_insert(w[0]), w[0], "id {} after two prefixes", w[1]);
            }
        }
    }

    #[test]
    fn the_shape_is_the_conversation_traces_roughly() {
        let t = trace();
        let median = |mut v: Vec<u32>| {
            v.sort_unstable();
            v[v.len() / 2]
        };
        let input = median(t.iter().map(|r| r.input_length).collect());
        let output = median(t.iter().map(|r| r.output_length).collect());
        assert!((5_000..10_000).contains(&input), "input median {input}");
        assert!((280..420).contains(&output), "output median {output}");
        let span_s = t.last().unwrap().timestamp_ms as f64 / 1e3;
        assert!((240.0..420.0).contains(&span_s), "{span_s} s");
        // Prefix reuse beyond the system prompt: multi-turn conversations and shared prefixes.
        let mut seen = HashSet::new();
        let (mut reused, mut total, mut deeper_hits) = (0, 0, 0);
        for r in &t {
            let hits = r.hash_ids.iter().take_while(|id| seen.contains(*id)).count();
            deeper_hits += usize::from(hits > 1);
            reused += hits;
            total += r.hash_ids.len();
            seen.extend(r.hash_ids.iter().copied());
        }
        let ratio = reused as f64 / total as f64;
        assert!((0.2..0.6).contains(&ratio), "prefix reuse {ratio}");
        assert!((250..550).contains(&deeper_hits), "{deeper_hits} requests hit more than block 0");
        // kv-index's default query needs prompts of 2,000 16-token pages.
        assert!(t.iter().filter(|r| r.input_length >= 32_000).count() >= 20);
    }

    #[test]
    fn the_reader_reads_the_lines_as_the_records() {
        let t = generate(&mut StdRng::seed_from_u64(5), 50);
        let text: String = t.iter().map(|r| r.line() + "\n").collect();
        let lines = Box::new(std::io::Cursor::new(text.into_bytes()));
        let read: Vec<_> = TraceReader::new(lines, Format::Auto).collect::<Result<_, _>>().unwrap();
        assert_eq!(read.len(), 50);
        for (r, s) in t.iter().zip(&read) {
            let turn = &s.turns[0];
            assert_eq!(
                (turn.at_ms, turn.input_tokens, turn.output_tokens),
                (r.timestamp_ms as f64, r.input_length, r.output_length)
            );
            assert_eq!(
                turn.blocks.iter().map(|b| (b.scope, b.id)).collect::<Vec<_>>(),
                r.hash_ids.iter().map(|id| (0, *id)).collect::<Vec<_>>()
            );
        }
    }
}

//! What the trace window allows, without timing: the infinite-cache bound, and how close
//! routing over N separate caches can come to it when every choice is made with hindsight-free
//! knowledge of what each cache holds (no queues, no prefills in flight).

use std::collections::HashMap;

use super::Args;
use crate::replay::trace::{self, BlockId, Format};

/// One request: its blocks and the prompt tokens each covers (the last one is partial).
pub(super) type Request = Vec<(BlockId, u64)>;

/// The first `--requests` requests of the trace as blocks, read once for both measures.
pub(super) fn requests(args: &Args) -> anyhow::Result<Vec<Request>> {
    let mut out: Vec<Request> = Vec::new();
    for session in args.trace.open(Format::Mooncake)?.take(args.requests) {
        for turn in &session?.turns {
            let mut left = u64::from(turn.input_tokens);
            let blocks = turn
                .blocks
                .iter()
                .map(|b| {
                    let tokens = left.min(u64::from(trace::MOONCAKE_BLOCK_TOKENS));
                    left -= tokens;
                    (*b, tokens)
                })
                .collect();
            out.push(blocks);
        }
    }
    anyhow::ensure!(out.iter().flatten().any(|&(_, t)| t > 0), "the trace window is empty");
    Ok(out)
}

/// Token-weighted prefix reuse of the first `--requests` requests with one infinite cache: a
/// block's tokens count as hits up to the most of it an earlier request had (a request that
/// had only part of a block cached only that part).
pub(super) fn infinite_cache_bound(requests: &[Request]) -> f64 {
    let (mut held, mut hit, mut total) = (HashMap::<BlockId, u64>::new(), 0u64, 0u64);
    for &(block, tokens) in requests.iter().flatten() {
        total += tokens;
        let have = held.entry(block).or_default();
        hit += (*have).min(tokens);
        *have = (*have).max(tokens);
    }
    hit as f64 / total as f64
}

/// The offline replay over N caches.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Offline {
    /// Cached ÷ prompt tokens.
    pub(super) hit_ratio: f64,
    /// Tokens each cache computed.
    pub(super) computed: Vec<u64>,
}

/// The same requests over `caches` infinite caches, in trace order: a request goes to the cache
/// holding its longest prefix when that prefix is longer than its first block (the system
/// prompt every request shares, which every cache soon holds), else to the cache that has
/// computed the fewest tokens. A block id names its whole prefix (Mooncake's ids do), so a cache
/// is a map from block to the most tokens of it it holds.
pub(super) fn offline_longest_prefix(requests: &[Request], caches: usize) -> Offline {
    let mut held: Vec<HashMap<BlockId, u64>> = vec![HashMap::new(); caches.max(1)];
    let mut computed = vec![0u64; held.len()];
    let (mut hit, mut total) = (0u64, 0u64);
    for request in requests {
        let prompt: u64 = request.iter().map(|(_, t)| t).sum();
        let prefix: Vec<u64> = held.iter().map(|c| prefix_tokens(c, request)).collect();
        let first_block = request.first().map_or(0, |(_, t)| *t);
        let least_loaded = (0..held.len()).min_by_key(|&i| (computed[i], i)).expect("one cache");
        let longest =
            (0..held.len()).max_by_key(|&i| (prefix[i], std::cmp::Reverse(computed[i]))).expect("one cache");
        let to = if prefix[longest] > first_block { longest } else { least_loaded };
        hit += prefix[to];
        total += prompt;
        computed[to] += prompt - prefix[to];
        for (block, tokens) in request {
            let t = held[to].entry(*block).or_default();
            *t = (*t).max(*tokens);
        }
    }
    Offline { hit_ratio: hit as f64 / total as f64, computed }
}

/// The leading tokens of `request` a cache holds.
fn prefix_tokens(cache: &HashMap<BlockId, u64>, request: &Request) -> u64 {
    let mut hit = 0;
    for (block, tokens) in request {
        let Some(&have) = cache.get(block) else { break };
        hit += have.min(*tokens);
        if have < *tokens {
            break;
        }
    }
    hit
}

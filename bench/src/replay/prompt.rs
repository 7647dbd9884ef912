//! Prompt text synthesised from a turn's hash blocks, so that shared `hash_ids` become shared
//! token prefixes on the worker.
//!
//! The sim counts one token per [`BYTES_PER_TOKEN`] bytes of text, so a block of `b` tokens is
//! `4·b` bytes of ASCII (2,048 bytes for a Mooncake 512-token block) drawn from a generator
//! seeded by the block's `(scope, id)` alone: the same block always has the same text, whatever
//! request it appears in. The prompt is the blocks' texts in order, cut at the turn's input
//! length; tokens beyond the last block (the agentic traces have no id for a partial tail) are
//! filler seeded by `(session, turn)` in a domain of its own, so they are shared with nothing.
//! The scopes of [`super::trace`] keep per-session ids of different sessions apart.

use super::trace::{BlockId, Session};

/// Bytes of prompt text the sim counts as one token.
pub(crate) const BYTES_PER_TOKEN: usize = 4;

/// Letters and a space: one byte each, so byte counts are character counts.
const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz      ";

/// The prompt text of turn `turn` of `session`: `input_tokens × 4` bytes.
pub(crate) fn prompt(session: &Session, turn: usize) -> String {
    let t = &session.turns[turn];
    let total = t.input_tokens as usize * BYTES_PER_TOKEN;
    let block_bytes = session.block_tokens as usize * BYTES_PER_TOKEN;
    let mut out = String::with_capacity(total);
    for block in &t.blocks {
        let left = total - out.len();
        if left == 0 {
            break;
        }
        push_text(&mut out, block_seed(*block), left.min(block_bytes));
    }
    let left = total - out.len();
    if left > 0 {
        push_text(&mut out, filler_seed(session.index, turn as u64), left);
    }
    out
}

fn block_seed(b: BlockId) -> u64 {
    mix(mix(b.scope ^ 0xb10c_b10c_b10c_b10c) ^ b.id)
}

fn filler_seed(session: u64, turn: u64) -> u64 {
    mix(mix(mix(0xf111_e4f1_11e4_f111) ^ session) ^ turn)
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `n` bytes of text from the generator seeded with `seed`.
fn push_text(out: &mut String, seed: u64, n: usize) {
    let mut state = seed;
    let mut bytes = Vec::with_capacity(n);
    while bytes.len() < n {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut r = mix(state);
        for _ in 0..12 {
            if bytes.len() == n {
                break;
            }
            bytes.push(ALPHABET[(r & 31) as usize]);
            r >>= 5;
        }
    }
    out.push_str(std::str::from_utf8(&bytes).expect("ASCII"));
}

#[cfg(test)]
mod tests {
    use super::super::trace::Turn;
    use super::*;

    fn session(index: u64, scope: u64, turns: &[(u32, &[u64])]) -> Session {
        let turns = turns
            .iter()
            .map(|(input, ids)| Turn {
                at_ms: 0.0,
                think_s: 0.0,
                input_tokens: *input,
                output_tokens: 1,
                blocks: ids.iter().map(|&id| BlockId { scope, id }).collect(),
            })
            .collect();
        Session { index, name: String::new(), block_tokens: 512, turns, subagents: Vec::new() }
    }

    fn common_prefix(a: &str, b: &str) -> usize {
        a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn length_is_four_bytes_per_input_token() {
        let s = session(0, 0, &[(1000, &[0, 1]), (3, &[]), (700, &[0])]);
        assert_eq!(prompt(&s, 0).len(), 4000);
        assert_eq!(prompt(&s, 1).len(), 12);
        assert_eq!(prompt(&s, 2).len(), 2800, "tokens past the last block are filler");
    }

    #[test]
    fn shared_hash_ids_give_shared_prefixes() {
        let a = session(0, 0, &[(1500, &[0, 1, 2])]);
        let b = session(1, 0, &[(1500, &[0, 1, 9])]);
        let (pa, pb) = (prompt(&a, 0), prompt(&b, 0));
        let shared = common_prefix(&pa, &pb);
        assert!((2 * 2048..2 * 2048 + 8).contains(&shared), "shared {shared} bytes");
        assert_eq!(prompt(&a, 0), pa, "deterministic");
    }

    #[test]
    fn sessions_with_local_ids_do_not_collide() {
        // The same local ids 1, 2 in two sessions (scopes 1 and 2, as the reader assigns).
        let a = session(0, 1, &[(1024, &[1, 2])]);
        let b = session(1, 2, &[(1024, &[1, 2])]);
        assert!(common_prefix(&prompt(&a, 0), &prompt(&b, 0)) < 8);
        // Filler of different sessions (no ids at all) does not collide either.
        let (c, d) = (session(2, 0, &[(100, &[])]), session(3, 0, &[(100, &[])]));
        assert!(common_prefix(&prompt(&c, 0), &prompt(&d, 0)) < 8);
    }
}

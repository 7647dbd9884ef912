//! Text ⇄ tokens without a tokenizer, deterministically.
//!
//! - Prompt text becomes one token per 4 bytes of UTF-8; each token id is a hash of its 4-byte
//!   chunk, so prompts that share a text prefix share a token prefix (the prefix cache sees it).
//! - Prompt pages (`--page-size` tokens) are keyed by SGLang's own page hash
//!   ([`infera_kv::hash`], see [`crate::prefix_cache::PromptPages`]).
//! - Output token `i` of a request is a word picked by a hash of (seed, rid, i): the same seed
//!   and rid always produce the same text.
//! - `/v1/detokenize` without a tokenizer: see [`detokenize`] (prompt tokens are hashes and
//!   cannot be turned back into their text).

/// Size of the emulated vocabulary.
const VOCAB: u64 = 151_552;

/// Output words (each token is one word, space-separated).
const WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "at", "by",
    "this", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which", "one", "you", "were",
    "all", "we",
];

/// SplitMix64 finaliser: a fast, well-mixed 64-bit hash step.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over bytes, then mixed: a stable hash of a string (rids, room keys).
pub fn hash_str(s: &str) -> u64 {
    let h =
        s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    mix(h)
}

/// Token ids of `text`: one per 4 bytes of UTF-8 (the last chunk may be shorter).
pub fn tokenize(text: &str) -> Vec<u32> {
    text.as_bytes()
        .chunks(4)
        .map(|chunk| {
            let mut word = [0u8; 4];
            word[..chunk.len()].copy_from_slice(chunk);
            let key = u64::from(u32::from_le_bytes(word)) | ((chunk.len() as u64) << 32);
            (mix(key) % VOCAB) as u32
        })
        .collect()
}

/// Output token `i` of the request with rid hash `rid`: (token id, word).
pub fn output_token(seed: u64, rid: u64, i: u32) -> (u32, &'static str) {
    let h = mix(seed ^ mix(rid ^ mix(u64::from(i))));
    ((h % VOCAB) as u32, WORDS[(h >> 32) as usize % WORDS.len()])
}

/// The text of `ids` without a tokenizer: token id `t` is the word `WORDS[t % 32]` of the sim's
/// output vocabulary, words joined by one space (`""` for no ids). Deterministic, not the
/// inverse of [`tokenize`] (whose ids are hashes of text): the same ids always read the same.
pub fn detokenize(ids: &[u32]) -> String {
    let words: Vec<&str> = ids.iter().map(|&t| WORDS[t as usize % WORDS.len()]).collect();
    words.join(" ")
}

/// The first `n` output tokens of a request: ids and text (`"w0 w1 …"`).
pub fn output(seed: u64, rid: u64, n: u32) -> (Vec<u32>, String) {
    let mut ids = Vec::with_capacity(n as usize);
    let mut text = String::new();
    for i in 0..n {
        let (id, word) = output_token(seed, rid, i);
        ids.push(id);
        if i > 0 {
            text.push(' ');
        }
        text.push_str(word);
    }
    (ids, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bytes_make_a_token_and_prefixes_are_shared() {
        assert_eq!(tokenize("").len(), 0);
        assert_eq!(tokenize("abcd").len(), 1);
        assert_eq!(tokenize("abcde").len(), 2);
        let a = tokenize("system: you are helpful\nuser: hi");
        let b = tokenize("system: you are helpful\nuser: bye");
        assert_eq!(a[..7], b[..7]);
        assert_ne!(a, b);
    }

    #[test]
    fn detokenized_ids_read_as_words() {
        assert_eq!(detokenize(&[]), "");
        assert_eq!(detokenize(&[0, 1, 33]), "the of of");
    }

    #[test]
    fn output_is_deterministic_per_seed_and_rid() {
        assert_eq!(output(1, 2, 5), output(1, 2, 5));
        assert_ne!(output(1, 2, 8).0, output(1, 3, 8).0);
        let (ids, text) = output(7, 7, 3);
        assert_eq!(ids.len(), 3);
        assert_eq!(text.split(' ').count(), 3);
        assert!(output(7, 7, 4).1.starts_with(&text));
    }
}

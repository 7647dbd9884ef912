//! What a pooling forward pass yields, emulated: deterministic in the input, shaped as the real
//! heads' outputs. Nothing is computed from a model.
//!
//! - An embedding is a unit vector of the hidden size drawn from a hash of the prompt's token
//!   ids: the same ids always give the same vector. `dimensions` keeps its first values and
//!   renormalises them, as SGLang's `Pooler` cuts a Matryoshka embedding before it normalises
//!   (python/sglang/srt/layers/pooler.py).
//! - A classification is a softmax over one logit per label, drawn the same way
//!   (`_build_classify_response` in python/sglang/srt/entrypoints/openai/serving_classify.py).
//! - A rerank score is in [0, 1], drawn from the query's and the document's texts (a
//!   decoder-only reranker's `p_yes / (p_yes + p_no)`, serving_rerank.py).

use crate::tokens::{hash_str, mix};

/// A stable hash of token ids.
fn hash_ids(ids: &[u32]) -> u64 {
    ids.iter().fold(mix(ids.len() as u64), |h, &t| mix(h ^ u64::from(t)))
}

/// Draw `i` of the stream `seed`, uniform in [-1, 1).
fn draw(seed: u64, i: u64) -> f64 {
    let unit = (mix(seed ^ mix(i)) >> 11) as f64 / (1u64 << 53) as f64;
    2.0 * unit - 1.0
}

/// The embedding of the prompt `ids`: its first `len` values (the hidden size, or the
/// `dimensions` asked for), scaled to unit length, as float32 like the model's output.
pub(super) fn embedding(ids: &[u32], len: u32) -> Vec<f32> {
    let seed = hash_ids(ids);
    let raw: Vec<f64> = (0..u64::from(len)).map(|i| draw(seed, i)).collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    let norm = if norm > 0.0 { norm } else { 1.0 };
    raw.iter().map(|x| (x / norm) as f32).collect()
}

/// The class probabilities of the prompt `ids` over `classes` labels (a softmax of logits in
/// [-4, 4)), as float32.
pub(super) fn class_probs(ids: &[u32], classes: usize) -> Vec<f32> {
    let seed = mix(hash_ids(ids) ^ 0x5eed_c1a5);
    let logits: Vec<f64> = (0..classes as u64).map(|i| 4.0 * draw(seed, i)).collect();
    let top = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = logits.iter().map(|l| (l - top).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.iter().map(|e| (e / sum) as f32).collect()
}

/// The index of the largest probability (the first on a tie, as `torch.argmax`).
pub(super) fn argmax(probs: &[f32]) -> usize {
    let mut best = 0;
    for (i, p) in probs.iter().enumerate() {
        if *p > probs[best] {
            best = i;
        }
    }
    best
}

/// The relevance of `document` to `query`, in [0, 1].
pub(super) fn rerank_score(query: &str, document: &str) -> f64 {
    let h = mix(hash_str(query) ^ mix(hash_str(document)));
    (h >> 11) as f64 / ((1u64 << 53) - 1) as f64
}

/// `encoding_format: "base64"`: the values as contiguous little-endian float32, in standard
/// base64 with padding (`_serialize_embedding` in
/// python/sglang/srt/entrypoints/openai/serving_embedding.py).
pub(super) fn base64_f32(values: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let a = embedding(&[1, 2, 3], 64);
        assert_eq!(a, embedding(&[1, 2, 3], 64));
        assert_ne!(a, embedding(&[1, 2, 4], 64));
        let norm: f64 = a.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        // A shorter one is the longer one's head, renormalised.
        let short = embedding(&[1, 2, 3], 8);
        let scale = f64::from(a[0]) / f64::from(short[0]);
        assert!(short.iter().zip(&a).all(|(s, l)| (f64::from(*s) * scale - f64::from(*l)).abs() < 1e-5));
    }

    #[test]
    fn probabilities_sum_to_one_and_scores_stay_in_range() {
        let p = class_probs(&[9, 9], 3);
        assert_eq!(p.len(), 3);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert_eq!(argmax(&[0.2, 0.5, 0.5]), 1);
        let s = rerank_score("q", "d");
        assert!((0.0..=1.0).contains(&s) && s == rerank_score("q", "d") && s != rerank_score("q", "e"));
    }

    #[test]
    fn base64_is_standard() {
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[]), "");
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
    }
}

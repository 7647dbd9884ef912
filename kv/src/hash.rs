//! Page hashes: SGLang's own chained SHA-256 over a page's token ids.
//!
//! SGLang (0.5.18–0.5.23, `mem_cache/utils.py` + `cpp_utils/hash_binding.cpp`) hashes the radix
//! cache page by page: `digest_i = SHA256(digest_{i-1} ‖ page_i)`, with no prior digest for the
//! first page and the page's tokens as little-endian `u32`. A page with a token above `u32::MAX`
//! is hashed as a `0xff` tag followed by little-endian `u64`s. The published block hash is the
//! first 8 bytes of the digest read big-endian as a signed `i64`.
//!
//! A request with a `cache_salt` is a namespace of its own in SGLang's radix cache, and its KV
//! events hash the chain after a seed: the first page's prior digest is
//! `SHA256("sglang-cache-salt-v1\0" ‖ salt)` (`compute_node_event_hash_values`, 0.5.18–0.5.23;
//! an empty salt is no salt, `GenerateReqInput._normalize_cache_salt`), see [`seed_of`].
//!
//! A LoRA adapter's pages are a namespace SGLang seeds with an engine-internal id; infera keys
//! them after a seed of its own for the adapter's name instead ([`adapter_seed`]).
//!
//! Because every digest covers all pages before it, two prompts share the hash of page `i` exactly
//! when they share the first `i + 1` pages: a page hash *is* a prefix. The proxy hashes prompts with
//! this function; control keys KV events by it, taking an engine's published hashes as they are
//! when they are SGLang's own and hashing the events' token ids with it when the engine namespaced
//! them (see the prefix index), so both sides speak the same keys.

use sha2::{Digest as _, Sha256};

/// A page's hash as SGLang publishes it: the first 8 bytes of the chained digest, big-endian, signed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct PageHash(pub i64);

/// The full chained SHA-256 state after a page; the next page's hash continues from it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ChainDigest(pub [u8; 32]);

impl ChainDigest {
    /// The published hash of the page this digest ends.
    pub fn page_hash(&self) -> PageHash {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        PageHash(i64::from_be_bytes(first))
    }
}

/// Hashes one page after `prior` (`None` for the first page of a sequence).
pub fn chain_page(prior: Option<&ChainDigest>, page: &[u64]) -> ChainDigest {
    let mut sha = Sha256::new();
    if let Some(p) = prior {
        sha.update(p.0);
    }
    if page.iter().any(|&t| t > u64::from(u32::MAX)) {
        sha.update([0xff]);
        for &t in page {
            sha.update(t.to_le_bytes());
        }
    } else {
        for &t in page {
            // In range: checked just above.
            sha.update((t as u32).to_le_bytes());
        }
    }
    ChainDigest(sha.finalize().into())
}

/// The digest a chain stored under `cache_salt` starts from: SGLang's KV events hash the salted
/// chain's first page after it (`mem_cache/utils.py`, `compute_node_event_hash_values`).
pub fn salt_seed(cache_salt: &str) -> ChainDigest {
    let mut sha = Sha256::new();
    sha.update(b"sglang-cache-salt-v1\0");
    sha.update(cache_salt.as_bytes());
    ChainDigest(sha.finalize().into())
}

/// The seed of a chain stored under `cache_salt`, if it has one: `None` and an empty salt are no
/// namespace, as SGLang normalises a request's salt (`GenerateReqInput._normalize_cache_salt`).
pub fn seed_of(cache_salt: Option<&str>) -> Option<ChainDigest> {
    cache_salt.filter(|s| !s.is_empty()).map(salt_seed)
}

/// The digest a LoRA adapter's chain starts from, in the index and the proxy: **infera's own**
/// stand-in for SGLang's namespace, which hashes the adapter's engine-internal `lora_id` and no
/// router can compute (0.5.23: `kv_event_namespace_seed`, python/sglang/srt/mem_cache/events.py).
/// The index keys an adapter's blocks (their events name `lora_name`) by their tokens chained
/// after this seed, and the proxy hashes a `base:adapter` prompt after it, so a prompt is credited
/// only with pages its own adapter stored (under its own salt). Lengths and a presence byte keep
/// `("a", "bc")` and `("ab", "c")` apart, as SGLang's seeds do.
pub fn adapter_seed(lora_name: &str, cache_salt: Option<&str>) -> ChainDigest {
    let mut sha = Sha256::new();
    sha.update(b"infera-lora-adapter-v1\0");
    sha.update((lora_name.len() as u64).to_le_bytes());
    sha.update(lora_name.as_bytes());
    match cache_salt.filter(|s| !s.is_empty()) {
        Some(salt) => {
            sha.update([1]);
            sha.update((salt.len() as u64).to_le_bytes());
            sha.update(salt.as_bytes());
        }
        None => sha.update([0]),
    }
    ChainDigest(sha.finalize().into())
}

/// The seed of a chain stored under `cache_salt` by the LoRA adapter `lora_name`, if any: the
/// adapter's ([`adapter_seed`]), else the salt's ([`seed_of`]).
pub fn namespace_seed(cache_salt: Option<&str>, lora_name: Option<&str>) -> Option<ChainDigest> {
    match lora_name.filter(|n| !n.is_empty()) {
        Some(name) => Some(adapter_seed(name, cache_salt)),
        None => seed_of(cache_salt),
    }
}

/// The page-hash sequence of a prompt: one hash per *full* page of `page_size` tokens (a partial
/// last page is not shareable between requests, so it is left out).
///
/// # Panics
/// If `page_size` is 0.
pub fn page_hashes(tokens: &[u32], page_size: usize) -> Vec<PageHash> {
    salted_page_hashes(None, tokens, page_size)
}

/// [`page_hashes`] of a prompt sent with `cache_salt`: the chain starts after [`seed_of`] it, as
/// SGLang's KV events hash it.
///
/// # Panics
/// If `page_size` is 0.
pub fn salted_page_hashes(cache_salt: Option<&str>, tokens: &[u32], page_size: usize) -> Vec<PageHash> {
    namespaced_page_hashes(cache_salt, None, tokens, page_size)
}

/// [`salted_page_hashes`] of a prompt served by the LoRA adapter `lora_name` (`None`: the base
/// model): the chain starts after [`namespace_seed`], as the index keys the adapter's blocks.
///
/// # Panics
/// If `page_size` is 0.
pub fn namespaced_page_hashes(
    cache_salt: Option<&str>,
    lora_name: Option<&str>,
    tokens: &[u32],
    page_size: usize,
) -> Vec<PageHash> {
    assert!(page_size > 0, "page_size must be positive");
    let mut out = Vec::with_capacity(tokens.len() / page_size);
    let mut prior = namespace_seed(cache_salt, lora_name);
    let mut page = Vec::with_capacity(page_size);
    for chunk in tokens.chunks_exact(page_size) {
        page.clear();
        page.extend(chunk.iter().map(|&t| u64::from(t)));
        let digest = chain_page(prior.as_ref(), &page);
        out.push(digest.page_hash());
        prior = Some(digest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: &ChainDigest) -> String {
        d.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    // Vectors computed independently with Python's hashlib from SGLang's description:
    // sha256(pack('<2I', 1, 2)), then sha256(d1 + pack('<2I', 3, 4)), and the wide form
    // sha256(d1 + b'\xff' + pack('<2Q', 3, 1 << 33)); block hash = int(hex[:16], 16) as int64.
    #[test]
    fn pages_chain_like_sglang() {
        let d1 = chain_page(None, &[1, 2]);
        assert_eq!(hex(&d1), "34fb5c825de7ca4aea6e712f19d439c1da0c92c37b423936c5f618545ca4fa1f");
        let d2 = chain_page(Some(&d1), &[3, 4]);
        assert_eq!(hex(&d2), "c57b445f90651b9a650e516ab2238c965b21af35608a31c303e6d9e407f2915c");
        let wide = chain_page(Some(&d1), &[3, 1 << 33]);
        assert_eq!(hex(&wide), "58b275574cfd4667f254dd8862bb6c2fa3fab492b4770807f76cb3acae32d4e2");
        assert_eq!(
            page_hashes(&[1, 2, 3, 4, 5], 2),
            vec![PageHash(3_817_746_824_117_602_890), PageHash(-4_216_701_448_867_210_342)]
        );
    }

    const SALT_SEED: &str = "f5d0f785efe6042a4e4b0297a4d712917e1763c850835e93df58b373fd47fd2c";
    const SALTED_PAGE_0: &str = "006feb306a146eedf00873bb27549df0e6a6d6792aac643ec3c99db3741fab7a";

    // Computed with Python's hashlib as SGLang 0.5.23 does it for `cache_salt="tenant-a"`:
    // seed = sha256(b"sglang-cache-salt-v1\0" + b"tenant-a").hexdigest(), then
    // get_hash_str([1, 2, 3, 4], seed, page_size=2) chains sha256(bytes.fromhex(seed) + pack('<2I', 1, 2)).
    #[test]
    fn a_salted_chain_starts_after_the_salt_seed() {
        let seed = salt_seed("tenant-a");
        assert_eq!(hex(&seed), SALT_SEED);
        let d1 = chain_page(Some(&seed), &[1, 2]);
        assert_eq!(hex(&d1), SALTED_PAGE_0);
        let salted = salted_page_hashes(Some("tenant-a"), &[1, 2, 3, 4], 2);
        assert_eq!(salted[0], d1.page_hash());
        assert_eq!(salted[1], chain_page(Some(&d1), &[3, 4]).page_hash());
        assert_ne!(salted, page_hashes(&[1, 2, 3, 4], 2), "a salt is a namespace of its own");
        assert_ne!(salted, salted_page_hashes(Some("tenant-b"), &[1, 2, 3, 4], 2));
        assert_eq!(
            salted_page_hashes(Some(""), &[1, 2, 3, 4], 2),
            page_hashes(&[1, 2, 3, 4], 2),
            "empty is none"
        );
    }

    #[test]
    fn an_adapters_chain_is_a_namespace_of_its_own_per_salt() {
        let tokens = [1, 2, 3, 4];
        let base = page_hashes(&tokens, 2);
        let sql = namespaced_page_hashes(None, Some("sql"), &tokens, 2);
        assert_eq!(sql.len(), 2);
        assert_eq!(sql[0], chain_page(Some(&adapter_seed("sql", None)), &[1, 2]).page_hash());
        assert_ne!(sql, base);
        assert_ne!(sql, namespaced_page_hashes(None, Some("chat"), &tokens, 2));
        let salted = namespaced_page_hashes(Some("t"), Some("sql"), &tokens, 2);
        assert!(salted != sql && salted != salted_page_hashes(Some("t"), &tokens, 2));
        assert_eq!(namespaced_page_hashes(Some(""), Some("sql"), &tokens, 2), sql, "empty salt is none");
        assert_eq!(namespaced_page_hashes(None, Some(""), &tokens, 2), base, "empty name is none");
        assert_ne!(adapter_seed("a", Some("bc")), adapter_seed("ab", Some("c")));
    }

    #[test]
    fn a_page_hash_names_the_whole_prefix() {
        let a = page_hashes(&[7, 7, 1, 2], 2);
        let b = page_hashes(&[8, 8, 1, 2], 2);
        assert_ne!(a[1], b[1], "same page, different prefix");
        assert_eq!(page_hashes(&[7, 7, 1, 2, 9, 9], 2)[..2], a[..]);
        assert!(page_hashes(&[1], 2).is_empty());
    }
}

//! Our page hashes against SGLang's own: `sglang_event_hashes.py` (next to this file) runs the
//! wheel's `compute_node_event_hash_values` over its C++ page hash, unmodified, for radix paths
//! with and without a `cache_salt` (and an `extra_key`, which SGLang's events leave out of the
//! hash), at page sizes 1 and 4, for the oldest and the newest supported release. The proxy's
//! hashes of the path's tokens under the same salt must be exactly the block hashes SGLang
//! publishes, node by node, or the index would key a salted chain by hashes no query carries.
//!
//! The venvs come from `cargo xtask setup` (with pybind11, g++ and OpenSSL's headers, to build
//! SGLang's hash_binding.cpp); `cargo xtask test` passes their Pythons as
//! `INFERA_SGLANG_<X_Y_Z>_PYTHON`.

use std::process::Command;

use infera_kv::hash::salted_page_hashes;
use infera_kv::testing::sglang_python;
use serde_json::Value;

fn sglang_hashes(version: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sglang_event_hashes.py");
    let out = Command::new(sglang_python(version)).arg(script).output().expect("the script runs");
    assert!(out.status.success(), "SGLang {version}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn our_hashes_equal_sglangs(version: &str) {
    let answer = sglang_hashes(version);
    assert_eq!(answer["version"], version);
    let cases = answer["cases"].as_array().unwrap();
    assert!(cases.iter().filter(|c| c["cache_salt"].is_string()).count() >= 4, "salted cases: {cases:?}");
    for case in cases {
        let page_size = case["page_size"].as_u64().unwrap() as usize;
        let tokens: Vec<u32> = case["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32))
            .collect();
        let theirs: Vec<i64> = case["hashes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n.as_array().unwrap().iter().map(|h| h.as_i64().unwrap()))
            .collect();
        let ours: Vec<i64> =
            salted_page_hashes(case["cache_salt"].as_str(), &tokens, page_size).iter().map(|h| h.0).collect();
        assert_eq!(ours, theirs, "SGLang {version}: {case}");
    }
}

#[test]
fn sglang_0_5_18_publishes_our_page_hashes() {
    our_hashes_equal_sglangs("0.5.18");
}

#[test]
fn sglang_0_5_23_publishes_our_page_hashes() {
    our_hashes_equal_sglangs("0.5.23");
}

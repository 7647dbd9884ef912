//! Why a router cannot hash a LoRA adapter's prompt as SGLang 0.5.23 publishes its pages:
//! `sglang_lora_hashes.py` (next to this file) runs the wheel's own code for one path stored by
//! an adapter named `sql`, under the `lora_id`s SGLang mints for it (a `uuid4` each time it is
//! loaded at run time, a `uuid5` of its name and path for `--lora-paths`). The published hashes
//! differ with the id although the name is the same, and none is the base model's: the name a
//! request carries (`base:sql`) does not determine them, so the index keys an adapter's blocks,
//! and the proxy hashes its prompts, after infera's own seed for the adapter's name
//! (`infera_kv::hash::adapter_seed`; manual/features/kv_aware_routing.md, "LoRA adapters").
//! Should a release seed the namespace from the name alone, this test fails, and SGLang's own
//! hashes could be used as they are.
//!
//! The venv comes from `cargo xtask setup`, as for `sglang_hashes.rs`.

use std::collections::HashSet;
use std::process::Command;

use infera_kv::hash::page_hashes;
use infera_kv::testing::sglang_python;
use serde_json::Value;

fn hashes(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|h| h.as_i64().unwrap()).collect()
}

#[test]
fn sglang_0_5_23_namespaces_an_adapters_pages_by_an_id_its_name_does_not_determine() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sglang_lora_hashes.py");
    let out = Command::new(sglang_python("0.5.23")).arg(script).output().expect("the script runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(answer["version"], "0.5.23");
    let page_size = answer["page_size"].as_u64().unwrap() as usize;
    let tokens: Vec<u32> =
        answer["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();

    // The base model's pages are our hashes (as sglang_hashes.rs checks at length).
    let ours: Vec<i64> = page_hashes(&tokens, page_size).iter().map(|h| h.0).collect();
    assert_eq!(hashes(&answer["base"]), ours);

    let adapters = answer["adapters"].as_array().unwrap();
    assert_eq!(adapters.len(), 4);
    assert!(adapters.iter().all(|a| a["name"] == "sql"), "one adapter name: {adapters:?}");
    let published: Vec<Vec<i64>> = adapters.iter().map(|a| hashes(&a["hashes"])).collect();
    for (a, h) in adapters.iter().zip(&published) {
        assert_eq!(h.len(), ours.len(), "{a}");
        assert!(h.iter().all(|x| !ours.contains(x)), "an adapter's page published under a base hash: {a}");
    }
    let distinct: HashSet<&Vec<i64>> = published.iter().collect();
    assert_eq!(distinct.len(), published.len(), "the same name, another id, other hashes: {adapters:?}");
}

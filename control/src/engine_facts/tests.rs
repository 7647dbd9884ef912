use infera_proto::types::{RegisteredWorker, Role, WorkerRecord};

use super::*;

/// The top-level keys SGLang 0.5.23 serves that control reads, for a decode at page size 16.
const SGLANG_DECODE: &str = r#"{
    "model_path": "/models/glm", "served_model_name": "glm", "dp_size": 1, "attn_dp_size": 8,
    "page_size": 16, "disaggregation_mode": "decode", "disaggregation_transfer_backend": "nixl",
    "kv_cache_dtype": "fp8_e4m3", "tp_size": 8
}"#;

#[test]
fn the_ranks_are_replicas_times_attention_groups() {
    assert_eq!(ranks_of(br#"{"dp_size": 8, "enable_dp_attention": true}"#), Ok(8), "SGLang ≤ 0.5.21");
    assert_eq!(ranks_of(br#"{"dp_size": 1, "attn_dp_size": 8}"#), Ok(8), "0.5.22+ attention DP");
    assert_eq!(ranks_of(br#"{"dp_size": 4, "attn_dp_size": 1}"#), Ok(4), "0.5.22+ replicas");
}

#[test]
fn every_fact_sglang_serves_is_read() {
    let facts = parse(SGLANG_DECODE.as_bytes()).unwrap();
    assert_eq!(
        facts,
        EngineFacts {
            ranks: 8,
            page_size: Some(16),
            served_model_name: Some("glm".into()),
            model_path: Some("/models/glm".into()),
            mode: Some(EngineMode::Decode),
            transfer_backend: Some("nixl".into()),
            kv_cache_dtype: Some("fp8_e4m3".into()),
        }
    );
}

#[test]
fn absent_facts_are_unknown_and_null_modes_are_aggregated() {
    let facts = parse(br#"{"dp_size": 2, "page_size": null}"#).unwrap();
    let unknown = EngineFacts {
        ranks: 2,
        page_size: None,
        served_model_name: None,
        model_path: None,
        mode: None,
        transfer_backend: None,
        kv_cache_dtype: None,
    };
    assert_eq!(facts, unknown);
    for (body, mode) in [
        (r#"{"dp_size": 1, "disaggregation_mode": "null"}"#, Some(EngineMode::Aggregated)),
        (r#"{"dp_size": 1, "disaggregation_mode": null}"#, Some(EngineMode::Aggregated)),
        (r#"{"dp_size": 1, "disaggregation_mode": "prefill"}"#, Some(EngineMode::Prefill)),
        (r#"{"dp_size": 1, "disaggregation_mode": "encode"}"#, None),
    ] {
        assert_eq!(parse(body.as_bytes()).unwrap().mode, mode, "{body}");
    }
}

#[test]
fn malformed_answers_say_what_is_wrong() {
    assert_eq!(ranks_of(b"<html>"), Err(MalformedServerInfo::NotAnObject));
    assert_eq!(ranks_of(b"[8]"), Err(MalformedServerInfo::NotAnObject));
    assert_eq!(ranks_of(br#"{"tp_size": 8}"#), Err(MalformedServerInfo::NoDpSize));
    assert_eq!(ranks_of(br#"{"dp_size": null}"#), Err(MalformedServerInfo::NoDpSize));
    for (body, key, value) in [
        (r#"{"dp_size": "eight"}"#, "dp_size", r#""eight""#),
        (r#"{"dp_size": 0}"#, "dp_size", "0"),
        (r#"{"dp_size": 2.5}"#, "dp_size", "2.5"),
        (r#"{"dp_size": -1}"#, "dp_size", "-1"),
        (r#"{"dp_size": 1, "attn_dp_size": 0}"#, "attn_dp_size", "0"),
        (r#"{"dp_size": 1, "page_size": 0}"#, "page_size", "0"),
        (r#"{"dp_size": 1, "page_size": "16"}"#, "page_size", r#""16""#),
    ] {
        assert_eq!(
            parse(body.as_bytes()),
            Err(MalformedServerInfo::NotASize { key, value: value.to_owned() }),
            "{body}"
        );
    }
    let huge = format!(r#"{{"dp_size": {}, "attn_dp_size": 2}}"#, u32::MAX);
    assert!(matches!(ranks_of(huge.as_bytes()), Err(MalformedServerInfo::TooLarge { .. })));
}

fn registered(role: Role, model: &str) -> RegisteredWorker {
    WorkerRecord::new("w", role, "http://h:1", model).without_dp_size()
}

#[test]
fn the_engine_wins_for_sizes_backend_and_dtype_and_disagreements_are_named() {
    let facts = parse(SGLANG_DECODE.as_bytes()).unwrap();
    // A record that says nothing of the ranks, page size 1 by default.
    let Reconciled { record, mismatches } = reconcile(registered(Role::Decode, "glm"), &facts).unwrap();
    assert_eq!((record.dp_size, record.page_size), (8, 16));
    assert_eq!(record.transfer_backend.as_deref(), Some("nixl"));
    assert_eq!(record.kv_cache_dtype.as_deref(), Some("fp8_e4m3"));
    let fields: Vec<_> = mismatches.iter().map(|m| m.field).collect();
    assert_eq!(fields, ["page_size"], "only what the record states is compared");
    assert_eq!(mismatches[0].to_string(), "the record says page_size 1, the engine runs 16");

    // A record that states everything, all of it wrong.
    let mut wrong = WorkerRecord::decode("w", "http://h:1", "glm", 2)
        .with_page_size(64)
        .with_transfer_backend("mooncake")
        .with_kv_cache_dtype("auto");
    wrong.labels.insert("zone".into(), "a".into());
    let Reconciled { record, mismatches } = reconcile(wrong.into(), &facts).unwrap();
    let fields: Vec<_> = mismatches.iter().map(|m| m.field).collect();
    assert_eq!(fields, ["dp_size", "page_size", "transfer_backend", "kv_cache_dtype"]);
    assert_eq!((record.dp_size, record.page_size), (8, 16));
    assert_eq!(record.labels["zone"], "a", "the rest of the record is kept");

    // An engine that says nothing but its ranks leaves the record as it is.
    let sparse = parse(br#"{"dp_size": 2}"#).unwrap();
    let kept =
        WorkerRecord::decode("w", "http://h:1", "glm", 2).with_page_size(64).with_transfer_backend("nixl");
    let Reconciled { record, mismatches } = reconcile(kept.clone().into(), &sparse).unwrap();
    assert_eq!((record, mismatches), (kept, vec![]));
}

#[test]
fn a_model_the_engine_does_not_serve_holds_the_worker_out() {
    let facts = parse(SGLANG_DECODE.as_bytes()).unwrap();
    assert!(reconcile(registered(Role::Decode, "glm"), &facts).is_ok(), "served_model_name");
    assert!(reconcile(registered(Role::Decode, "/models/glm"), &facts).is_ok(), "model_path");
    let e = reconcile(registered(Role::Decode, "llama"), &facts).unwrap_err();
    assert_eq!(e.reason(), "model_mismatch");
    assert_eq!(
        e.to_string(),
        r#"the record's model is "llama", but the engine serves served_model_name "glm" (model_path "/models/glm")"#
    );
    let nameless = parse(br#"{"dp_size": 1}"#).unwrap();
    assert!(reconcile(registered(Role::Decode, "llama"), &nameless).is_ok(), "nothing to judge by");
}

#[test]
fn a_role_the_engine_contradicts_holds_the_worker_out() {
    let facts = parse(SGLANG_DECODE.as_bytes()).unwrap();
    for role in [Role::Prefill, Role::Mixed] {
        let e = reconcile(registered(role, "glm"), &facts).unwrap_err();
        assert_eq!(e.reason(), "role_mismatch");
        assert!(e.to_string().ends_with("but the engine runs disaggregation_mode decode"), "{e}");
    }
    let aggregated = parse(br#"{"dp_size": 1, "disaggregation_mode": "null"}"#).unwrap();
    assert!(reconcile(registered(Role::Mixed, "glm"), &aggregated).is_ok());
    let e = reconcile(registered(Role::Decode, "glm"), &aggregated).unwrap_err();
    assert_eq!(e.to_string(), "the record's role is decode, but the engine runs disaggregation_mode null");
}

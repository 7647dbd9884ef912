use infera_proto::types::{Role, WorkerId};

use super::*;

fn key(page_size: u32) -> PairingKey {
    PairingKey { page_size, transfer_backend: Some("mooncake".into()), kv_cache_dtype: Some("auto".into()) }
}

fn member(id: &str, role: Role, key: PairingKey, ranks: u32) -> Member {
    Member { id: WorkerId::new(id), role, key, ranks }
}

fn reasons(p: &ModelPairing) -> Vec<(&str, &str)> {
    p.unpaired.iter().map(|(id, u)| (id.as_str(), u.reason.as_str())).collect()
}

#[test]
fn a_prefill_and_a_decode_that_agree_pair() {
    let p = pair(&[member("p", Role::Prefill, key(16), 1), member("d", Role::Decode, key(16), 8)]);
    assert_eq!(p, ModelPairing { serving: Some(key(16)), no_pair: None, unpaired: BTreeMap::new() });
}

#[test]
fn no_complete_group_refuses_the_model_and_names_both_sides() {
    let p = pair(&[member("p", Role::Prefill, key(16), 1), member("d", Role::Decode, key(1), 1)]);
    assert_eq!(p.serving, None);
    assert_eq!(
        reasons(&p),
        [
            ("d", "page_size 1, but the model's prefills run page_size 16"),
            ("p", "page_size 16, but the model's decodes run page_size 1"),
        ]
    );
    assert_eq!(p.no_pair.as_deref(), Some("its prefills run page_size 16, its decodes run page_size 1"));
    assert_eq!((p.unpaired_of(Role::Prefill), p.unpaired_of(Role::Decode)), (1, 1));
}

#[test]
fn the_largest_complete_group_serves_and_the_rest_are_unpaired() {
    // Page 16: two decodes and a prefill (3 workers); page 1: one of each (2 workers); page 64:
    // three decodes but no prefill (incomplete, however large).
    let p = pair(&[
        member("p16", Role::Prefill, key(16), 1),
        member("d16-a", Role::Decode, key(16), 1),
        member("d16-b", Role::Decode, key(16), 1),
        member("p1", Role::Prefill, key(1), 1),
        member("d1", Role::Decode, key(1), 1),
        member("d64-a", Role::Decode, key(64), 1),
        member("d64-b", Role::Decode, key(64), 1),
        member("d64-c", Role::Decode, key(64), 1),
        member("x", Role::Mixed, key(2), 1),
    ]);
    assert_eq!(p.serving, Some(key(16)));
    assert_eq!(p.no_pair, None);
    assert_eq!(
        reasons(&p),
        [
            ("d1", "page_size 1, but the model's paired workers run page_size 16"),
            ("d64-a", "page_size 64, but the model's paired workers run page_size 16"),
            ("d64-b", "page_size 64, but the model's paired workers run page_size 16"),
            ("d64-c", "page_size 64, but the model's paired workers run page_size 16"),
            ("p1", "page_size 1, but the model's paired workers run page_size 16"),
        ],
        "mixed workers are never paired"
    );
}

#[test]
fn ties_go_to_more_ranks_then_to_the_first_worker_id() {
    let even = |ranks_of_1: u32| {
        pair(&[
            member("b-p", Role::Prefill, key(16), 1),
            member("b-d", Role::Decode, key(16), 1),
            member("a-p", Role::Prefill, key(1), 1),
            member("a-d", Role::Decode, key(1), ranks_of_1),
        ])
    };
    assert_eq!(even(1).serving, Some(key(1)), "equal in workers and ranks: a-… sorts first");
    let other_order = pair(&[
        member("a-d", Role::Decode, key(1), 1),
        member("b-d", Role::Decode, key(16), 1),
        member("a-p", Role::Prefill, key(1), 1),
        member("b-p", Role::Prefill, key(16), 1),
    ]);
    assert_eq!(even(1), other_order, "the order workers come in does not matter");
    let more_ranks = pair(&[
        member("b-p", Role::Prefill, key(16), 1),
        member("b-d", Role::Decode, key(16), 8),
        member("a-p", Role::Prefill, key(1), 1),
        member("a-d", Role::Decode, key(1), 1),
    ]);
    assert_eq!(more_ranks.serving, Some(key(16)), "8 decode ranks beat 1");
}

#[test]
fn one_role_alone_has_nothing_to_pair() {
    let decodes = pair(&[member("d1", Role::Decode, key(1), 1), member("d16", Role::Decode, key(16), 1)]);
    assert_eq!(decodes, ModelPairing::default());
    assert_eq!(pair(&[member("x", Role::Mixed, key(1), 1)]), ModelPairing::default());
}

#[test]
fn every_differing_field_is_named_and_unknown_pairs_only_with_unknown() {
    let nixl_fp8 = PairingKey {
        page_size: 16,
        transfer_backend: Some("nixl".into()),
        kv_cache_dtype: Some("fp8_e4m3".into()),
    };
    let p = pair(&[member("p", Role::Prefill, key(16), 1), member("d", Role::Decode, nixl_fp8, 1)]);
    assert_eq!(
        reasons(&p)[1],
        (
            "p",
            "transfer_backend mooncake, kv_cache_dtype auto, but the model's decodes run \
             transfer_backend nixl, kv_cache_dtype fp8_e4m3"
        )
    );
    let unknown =
        PairingKey { page_size: 16, transfer_backend: Some("mooncake".into()), kv_cache_dtype: None };
    let p = pair(&[member("p", Role::Prefill, key(16), 1), member("d", Role::Decode, unknown.clone(), 1)]);
    assert_eq!(
        reasons(&p)[0],
        ("d", "kv_cache_dtype unknown, but the model's prefills run kv_cache_dtype auto")
    );
    let both = pair(&[member("p", Role::Prefill, unknown.clone(), 1), member("d", Role::Decode, unknown, 1)]);
    assert!(both.unpaired.is_empty() && both.serving.is_some());
}

#[test]
fn several_keys_on_the_other_side_are_listed() {
    let p = pair(&[
        member("p", Role::Prefill, key(16), 1),
        member("d1", Role::Decode, key(1), 1),
        member("d8", Role::Decode, key(8), 1),
    ]);
    assert_eq!(reasons(&p)[2], ("p", "page_size 16, but the model's decodes run page_size 1 or page_size 8"));
    assert_eq!(
        p.no_pair.as_deref(),
        Some("its prefills run page_size 16, its decodes run page_size 1 or page_size 8")
    );
}

use proptest::prelude::*;

use super::*;
use crate::event::KvEvent;

/// One batch (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`) as SGLang 0.5.17–0.5.19's msgspec
/// encodes it (tagged arrays: `KVCacheEvent` is `array_like` in SGLang 0.5.18
/// `python/sglang/srt/disaggregation/kv_events.py`).
const GOLDEN_ARRAYS: &str = "93cb3ff80000000000009397ab426c6f636b53746f7265649201fec0940a0b0c0d02c0a347505593ac426c6f636b52656d6f76656491fea347505591b0416c6c426c6f636b73436c656172656400";
/// The same batch from SGLang 0.5.20–0.5.23 (tagged maps).
const GOLDEN_MAPS: &str = "93cb3ff80000000000009387a474797065ab426c6f636b53746f726564ac626c6f636b5f6861736865739201feb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473940a0b0c0daa626c6f636b5f73697a6502a76c6f72615f6964c0a66d656469756da347505583a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391fea66d656469756da347505581a474797065b0416c6c426c6f636b73436c656172656400";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn golden_batch() -> EventBatch {
    EventBatch {
        ts: 1.5,
        events: vec![
            KvEvent::BlockStored {
                block_hashes: vec![1, -2],
                parent_block_hash: None,
                token_ids: vec![10, 11, 12, 13],
                block_size: 2,
                medium: Medium::Gpu,
                cache_salt: None,
                lora_name: None,
            },
            KvEvent::BlockRemoved { block_hashes: vec![-2], medium: Medium::Gpu },
            KvEvent::AllBlocksCleared,
        ],
        attn_dp_rank: Some(0),
    }
}

/// A tiny msgpack writer for hand-made payloads.
fn mp(build: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = Vec::new();
    build(&mut v);
    v
}

#[test]
fn goldens_decode_both_encodings() {
    assert_eq!(decode_batch(&unhex(GOLDEN_ARRAYS)).unwrap(), golden_batch());
    assert_eq!(decode_batch(&unhex(GOLDEN_MAPS)).unwrap(), golden_batch());
}

#[test]
fn goldens_encode_byte_for_byte() {
    assert_eq!(encode_batch(&golden_batch(), Encoding::Arrays).unwrap(), unhex(GOLDEN_ARRAYS));
    assert_eq!(encode_batch(&golden_batch(), Encoding::Maps).unwrap(), unhex(GOLDEN_MAPS));
}

#[test]
fn encodings_follow_the_sglang_version() {
    assert_eq!(Encoding::for_sglang("0.5.18"), Encoding::Arrays);
    assert_eq!(Encoding::for_sglang("0.5.19"), Encoding::Arrays);
    assert_eq!(Encoding::for_sglang("0.5.20"), Encoding::Maps);
    assert_eq!(Encoding::for_sglang("0.5.23.post1"), Encoding::Maps);
    assert_eq!(Encoding::for_sglang("0.6.0rc1"), Encoding::Maps);
    assert_eq!(Encoding::for_sglang("main"), Encoding::Maps);
    assert!(!sglang_at_least("0.5.21", [0, 5, 22]));
}

#[test]
fn every_integer_width_is_accepted() {
    // block_hashes as u8, u16, u32, u64, i8, i16, i32, i64 and both fixints.
    let payload = mp(|v| {
        v.extend([0x93, 0x00, 0x91, 0x92, 0xac]);
        v.extend(b"BlockRemoved");
        v.push(0x9a);
        v.extend([0x05, 0xff, 0xcc, 200, 0xcd, 1, 0, 0xce, 0, 1, 0, 0]);
        v.extend([0xcf, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        v.extend([0xd0, 0x80, 0xd1, 0x80, 0x00, 0xd2, 0x80, 0, 0, 0]);
        v.extend([0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0]);
        v.push(0xcc);
        v.push(7);
    });
    let b = decode_batch(&payload).unwrap();
    assert_eq!(b.ts, 0.0, "an int timestamp is a number too");
    assert_eq!(b.attn_dp_rank, Some(7));
    let KvEvent::BlockRemoved { block_hashes, medium } = &b.events[0] else { panic!() };
    assert_eq!(block_hashes, &[5, -1, 200, 256, 65_536, i64::MAX, -128, -32_768, -2_147_483_648, i64::MIN]);
    assert_eq!(*medium, Medium::Gpu, "no medium element means the GPU pool");
}

#[test]
fn eagle_bigrams_become_their_first_token_and_rank_may_be_nil_or_missing() {
    let batch = |rank: &[u8]| {
        mp(|v| {
            v.push(if rank.is_empty() { 0x92 } else { 0x93 });
            v.extend([0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x91, 0x84]);
            v.extend([0xa4]);
            v.extend(b"type");
            v.push(0xab);
            v.extend(b"BlockStored");
            v.extend([0xac]);
            v.extend(b"block_hashes");
            v.extend([0x91, 0x2a, 0xa9]);
            v.extend(b"token_ids");
            v.extend([0x92, 0x92, 0x01, 0x02, 0x92, 0xcd, 0x12, 0x34, 0x05]);
            v.push(0xaa);
            v.extend(b"block_size");
            v.push(0x02);
            v.extend(rank);
        })
    };
    for rank in [&[0xc0][..], &[]] {
        let b = decode_batch(&batch(rank)).unwrap();
        assert_eq!(b.attn_dp_rank, None);
        assert_eq!(
            b.events,
            [KvEvent::BlockStored {
                block_hashes: vec![42],
                parent_block_hash: None,
                token_ids: vec![1, 0x1234],
                block_size: 2,
                medium: Medium::Gpu,
                cache_salt: None,
                lora_name: None,
            }],
            "omitted parent, lora_id and medium take their defaults"
        );
    }
}

#[test]
fn unknown_map_keys_are_skipped_and_the_cache_salt_is_read() {
    // 0.5.22+ fields and a made-up nested one in a map event.
    let maps = mp(|v| {
        v.extend([0x93, 0x00, 0x91, 0x84, 0xa4]);
        v.extend(b"type");
        v.push(0xac);
        v.extend(b"BlockRemoved");
        v.push(0xa9);
        v.extend(b"lora_name");
        v.push(0xa1);
        v.push(b'x');
        v.push(0xa6);
        v.extend(b"future");
        v.extend([0x82, 0x01, 0x91, 0x90, 0x02, 0xc7, 0x01, 0x05, 0xaa]);
        v.push(0xac);
        v.extend(b"block_hashes");
        v.extend([0x91, 0x07, 0x03]);
    });
    let b = decode_batch(&maps).unwrap();
    assert_eq!(b.events, [KvEvent::BlockRemoved { block_hashes: vec![7], medium: Medium::Gpu }]);
    // 0.5.18's BlockStoredWithMetadata: the same tag, eight elements, a trailing map whose
    // cache_salt is read.
    let arrays = mp(|v| {
        v.extend([0x93, 0x00, 0x91, 0x98, 0xab]);
        v.extend(b"BlockStored");
        v.extend([0x91, 0x01, 0x05, 0x91, 0x09, 0x01, 0xc0, 0xaa]);
        v.extend(b"CPU_PINNED");
        v.extend([0x81, 0xaa]);
        v.extend(b"cache_salt");
        v.extend([0xa1, b's', 0x00]);
    });
    let b = decode_batch(&arrays).unwrap();
    assert_eq!(
        b.events,
        [KvEvent::BlockStored {
            block_hashes: vec![1],
            parent_block_hash: Some(5),
            token_ids: vec![9],
            block_size: 1,
            medium: Medium::CpuPinned,
            cache_salt: Some("s".to_owned()),
            lora_name: None,
        }]
    );
    // 0.5.20+: a `cache_salt` key.
    let salted = mp(|v| {
        v.extend([0x93, 0x00, 0x91, 0x85, 0xa4]);
        v.extend(b"type");
        v.push(0xab);
        v.extend(b"BlockStored");
        v.push(0xac);
        v.extend(b"block_hashes");
        v.extend([0x91, 0x01]);
        v.push(0xa9);
        v.extend(b"token_ids");
        v.extend([0x91, 0x09]);
        v.push(0xaa);
        v.extend(b"block_size");
        v.push(0x01);
        v.push(0xaa);
        v.extend(b"cache_salt");
        v.extend([0xa2, b't', b'a', 0x00]);
    });
    let b = decode_batch(&salted).unwrap();
    assert!(
        matches!(&b.events[..], [KvEvent::BlockStored { cache_salt: Some(s), parent_block_hash: None, .. }] if s == "ta"),
        "{:?}",
        b.events
    );
}

#[test]
fn errors_name_the_event_and_field() {
    let err = |payload: Vec<u8>| decode_batch(&payload).unwrap_err().to_string();
    // Event 0 is a map whose block_hashes holds a string.
    let e = err(mp(|v| {
        v.extend([0x93, 0x00, 0x91, 0x82, 0xa4]);
        v.extend(b"type");
        v.push(0xac);
        v.extend(b"BlockRemoved");
        v.push(0xac);
        v.extend(b"block_hashes");
        v.extend([0x91, 0xa1, b'x', 0x00]);
    }));
    assert_eq!(e, "event 0 `block_hashes`: expected int, found str");
    assert_eq!(
        err(vec![0x93, 0x00, 0x91, 0x91, 0xa3, b'F', b'o', b'o', 0x00]),
        "event 0 `type`: unknown event type \"Foo\""
    );
    assert_eq!(
        err(vec![0x94, 0x00, 0x90, 0x00, 0x00]),
        "batch: array of 4 elements, expected [ts, events, attn_dp_rank]"
    );
    assert_eq!(err(vec![0x93, 0x00, 0x90, 0x00, 0x00]), "1 trailing byte(s) after the batch");
    assert_eq!(
        err(vec![0x93, 0x00, 0x90, 0xd0, 0xff]),
        "batch `attn_dp_rank`: integer -1 out of range (0..=u32::MAX)"
    );
    let e = err(mp(|v| {
        v.extend([0x93, 0x00, 0x91, 0x81, 0xa4]);
        v.extend(b"type");
        v.push(0xab);
        v.extend(b"BlockStored");
        v.push(0x00);
    }));
    assert_eq!(e, "event 0 `block_hashes`: missing");
    let e = err(mp(|v| {
        v.extend([0x93, 0x00, 0x91, 0x93, 0xac]);
        v.extend(b"BlockRemoved");
        v.extend([0x90, 0xa3]);
        v.extend(b"RAM");
        v.push(0x00);
    }));
    assert_eq!(e, "event 0 `medium`: unknown storage medium \"RAM\"");
    assert!(err(vec![0x93, 0xcb, 0x3f]).starts_with("truncated payload"));
}

#[test]
fn caps_reject_oversized_declarations_without_allocating() {
    // block_hashes declares 65,537 elements.
    let mut v = vec![0x93, 0x00, 0x91, 0x92, 0xac];
    v.extend(b"BlockRemoved");
    v.push(0xdd);
    v.extend(65_537u32.to_be_bytes());
    v.extend(std::iter::repeat_n(0u8, 65_537));
    assert!(matches!(
        decode_batch(&v),
        Err(WireError::TooLong { len: 65_537, cap: MAX_HASHES_PER_EVENT, .. })
    ));
    // An events array declaring 4 billion elements in a tiny payload is truncation, not an OOM.
    assert!(matches!(
        decode_batch(&[0x93, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff]),
        Err(WireError::TooLong { .. })
    ));
    assert!(matches!(decode_batch(&[0x93, 0x00, 0xdc, 0x10, 0x00]), Err(WireError::Truncated { .. })));
    // Deep nesting inside an ignored key stops at the depth limit.
    let mut deep = vec![0x93, 0x00, 0x91, 0x82, 0xa4];
    deep.extend(b"type");
    deep.push(0xb0);
    deep.extend(b"AllBlocksCleared");
    deep.extend([0xa1, b'x']);
    deep.extend(std::iter::repeat_n(0x91u8, 10_000));
    deep.push(0x00);
    deep.push(0x00);
    assert!(matches!(decode_batch(&deep), Err(WireError::TooDeep { .. })));
    // The encoder refuses what the decoder would refuse.
    let big = EventBatch {
        ts: 0.0,
        events: vec![KvEvent::BlockRemoved { block_hashes: vec![0; 65_537], medium: Medium::Gpu }],
        attn_dp_rank: None,
    };
    assert!(encode_batch(&big, Encoding::Maps).is_err());
}

fn medium() -> impl Strategy<Value = Medium> {
    prop_oneof![Just(Medium::Gpu), Just(Medium::CpuPinned), Just(Medium::Disk), Just(Medium::External)]
}

fn event() -> impl Strategy<Value = KvEvent> {
    prop_oneof![
        (
            prop::collection::vec(any::<i64>(), 0..6),
            any::<Option<i64>>(),
            prop::collection::vec(any::<u64>(), 0..20),
            1u32..,
            medium(),
            prop::option::of("[a-zé-]{0,12}"),
        )
            .prop_map(
                |(block_hashes, parent_block_hash, token_ids, block_size, medium, cache_salt)| {
                    KvEvent::BlockStored {
                        block_hashes,
                        parent_block_hash,
                        token_ids,
                        block_size,
                        medium,
                        cache_salt,
                        lora_name: None,
                    }
                }
            ),
        (prop::collection::vec(any::<i64>(), 0..6), medium())
            .prop_map(|(block_hashes, medium)| KvEvent::BlockRemoved { block_hashes, medium }),
        Just(KvEvent::AllBlocksCleared),
    ]
}

fn batch() -> impl Strategy<Value = EventBatch> {
    (-1e12f64..1e12, prop::collection::vec(event(), 0..6), any::<Option<u32>>())
        .prop_map(|(ts, events, attn_dp_rank)| EventBatch { ts, events, attn_dp_rank })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_batch(&bytes);
    }

    #[test]
    fn truncated_and_corrupted_goldens_never_panic(cut in 0usize..400, at in 0usize..400, byte in any::<u8>()) {
        for golden in [GOLDEN_ARRAYS, GOLDEN_MAPS] {
            let full = unhex(golden);
            let cut = cut % full.len();
            prop_assert!(decode_batch(&full[..cut]).is_err(), "a strict prefix is never a batch");
            let mut bent = full.clone();
            let at = at % bent.len();
            bent[at] = byte;
            let _ = decode_batch(&bent);
        }
    }

    #[test]
    fn batches_round_trip_in_both_encodings(b in batch()) {
        for encoding in [Encoding::Arrays, Encoding::Maps] {
            let bytes = encode_batch(&b, encoding).unwrap();
            prop_assert_eq!(&decode_batch(&bytes).unwrap(), &b);
        }
    }
}

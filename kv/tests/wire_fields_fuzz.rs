//! KV-event batches and `LoadStat` payloads with one field bent (wrong type, out of range,
//! unknown name, bad UTF-8, missing, huge declared lengths): the decoder's error names that
//! event and field; the same frames unbent decode.

use infera_kv::load::{LoadStatError, decode_load_stat};
use infera_kv::wire::{Location, MAX_EVENTS_PER_BATCH, WireError, decode_batch};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rmp::encode;

fn config(cases: u32) -> ProptestConfig {
    let persistence = FileFailurePersistence::Direct("proptest-regressions/wire_fields_fuzz.txt");
    ProptestConfig { cases, failure_persistence: Some(Box::new(persistence)), ..ProptestConfig::default() }
}

/// A msgpack value to write.
#[derive(Clone, Debug)]
enum Mp {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    F64(f64),
    Str(String),
    /// A str whose bytes are not UTF-8.
    BadStr(Vec<u8>),
    Arr(Vec<Mp>),
    Map(Vec<(String, Mp)>),
}

fn write(v: &Mp, out: &mut Vec<u8>) {
    match v {
        Mp::Nil => encode::write_nil(out).unwrap(),
        Mp::Bool(b) => encode::write_bool(out, *b).unwrap(),
        Mp::Int(i) => drop(encode::write_sint(out, *i).unwrap()),
        Mp::UInt(u) => drop(encode::write_uint(out, *u).unwrap()),
        Mp::F64(f) => encode::write_f64(out, *f).unwrap(),
        Mp::Str(s) => encode::write_str(out, s).unwrap(),
        Mp::BadStr(b) => {
            encode::write_str_len(out, b.len() as u32).unwrap();
            out.extend_from_slice(b);
        }
        Mp::Arr(items) => {
            encode::write_array_len(out, items.len() as u32).unwrap();
            items.iter().for_each(|i| write(i, out));
        }
        Mp::Map(entries) => {
            encode::write_map_len(out, entries.len() as u32).unwrap();
            for (k, v) in entries {
                encode::write_str(out, k).unwrap();
                write(v, out);
            }
        }
    }
}

fn bytes(v: &Mp) -> Vec<u8> {
    let mut out = Vec::new();
    write(v, &mut out);
    out
}

fn ints(v: &[i64]) -> Mp {
    Mp::Arr(v.iter().copied().map(Mp::Int).collect())
}

/// A valid `BlockStored`'s fields, in declaration order (`lora_id` included).
fn stored_fields(hashes: &[i64], tokens: &[u64], block_size: u32) -> Vec<(&'static str, Mp)> {
    vec![
        ("type", Mp::Str("BlockStored".into())),
        ("block_hashes", ints(hashes)),
        ("parent_block_hash", Mp::Nil),
        ("token_ids", Mp::Arr(tokens.iter().copied().map(Mp::UInt).collect())),
        ("block_size", Mp::UInt(u64::from(block_size))),
        ("lora_id", Mp::Nil),
        ("medium", Mp::Str("CPU_PINNED".into())),
    ]
}

/// An event from its fields: a tagged array (values in order) or a tagged map.
fn event(fields: Vec<(&'static str, Mp)>, as_map: bool) -> Mp {
    if as_map {
        Mp::Map(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    } else {
        Mp::Arr(fields.into_iter().map(|(_, v)| v).collect())
    }
}

fn batch(events: Vec<Mp>) -> Vec<u8> {
    bytes(&Mp::Arr(vec![Mp::F64(1.5), Mp::Arr(events), Mp::UInt(0)]))
}

fn location(e: &WireError) -> Option<Location> {
    match e {
        WireError::Type { at, .. }
        | WireError::OutOfRange { at, .. }
        | WireError::TooLong { at, .. }
        | WireError::EventShape { at, .. }
        | WireError::UnknownEvent { at, .. }
        | WireError::UnknownMedium { at, .. }
        | WireError::MissingField { at }
        | WireError::ZeroBlockSize { at }
        | WireError::Utf8 { at }
        | WireError::TooDeep { at, .. } => Some(*at),
        WireError::Truncated { .. } | WireError::BatchShape { .. } | WireError::Trailing { .. } => None,
    }
}

/// Values wrong for `field`, whatever the encoding.
fn bad_value(field: &'static str) -> BoxedStrategy<Mp> {
    let wrong_type = prop_oneof![
        Just(Mp::Bool(true)),
        Just(Mp::F64(0.5)),
        Just(Mp::Map(vec![("k".into(), Mp::UInt(1))])),
        Just(Mp::BadStr(vec![0xff, 0xfe]))
    ];
    let huge = (i64::MAX as u64 + 1)..=u64::MAX;
    match field {
        "type" => prop_oneof![Just(Mp::Str("BlockMoved".into())), Just(Mp::UInt(1)), wrong_type].boxed(),
        "block_hashes" | "parent_block_hash" => prop_oneof![
            huge.clone().prop_map(move |h| if field == "block_hashes" {
                Mp::Arr(vec![Mp::UInt(h)])
            } else {
                Mp::UInt(h)
            }),
            Just(Mp::Arr(vec![Mp::Str("h".into())])),
            Just(Mp::Str("h".into())),
            wrong_type,
        ]
        .prop_filter("a nil parent is valid", move |v| field == "block_hashes" || !matches!(v, Mp::Arr(_)))
        .boxed(),
        "token_ids" => prop_oneof![
            (i64::MIN..0).prop_map(|t| Mp::Arr(vec![Mp::Int(t)])),
            Just(Mp::Arr(vec![Mp::Arr(vec![Mp::UInt(1)])])),
            Just(Mp::Arr(vec![Mp::Arr(vec![Mp::UInt(1), Mp::UInt(2), Mp::UInt(3)])])),
            Just(Mp::Arr(vec![Mp::F64(1.0)])),
            Just(Mp::Nil),
            wrong_type,
        ]
        .boxed(),
        "block_size" => prop_oneof![
            Just(Mp::UInt(0)),
            (i64::MIN..0).prop_map(Mp::Int),
            (u64::from(u32::MAX) + 1..).prop_map(Mp::UInt),
            Just(Mp::Nil),
            wrong_type,
        ]
        .boxed(),
        _ => prop_oneof![
            Just(Mp::Str("TAPE".into())),
            Just(Mp::Str("gpu".into())),
            Just(Mp::UInt(1)),
            wrong_type
        ]
        .boxed(),
    }
}

fn bent_batch() -> impl Strategy<Value = (Vec<u8>, Vec<u8>, Location)> {
    let field = prop::sample::select(vec![
        "type",
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "medium",
    ]);
    let shape = (
        prop::collection::vec(any::<i64>(), 0..4),
        prop::collection::vec(any::<u64>(), 0..8),
        1u32..,
        any::<bool>(),
        0usize..3,
    );
    (field, shape).prop_flat_map(|(field, (hashes, tokens, size, as_map, before))| {
        bad_value(field).prop_map(move |bad| {
            let valid = stored_fields(&hashes, &tokens, size);
            let mut bent = valid.clone();
            bent.iter_mut().find(|(f, _)| *f == field).expect("a field").1 = bad;
            let good: Vec<Mp> = (0..=before).map(|_| event(valid.clone(), as_map)).collect();
            let mut events: Vec<Mp> = good[..before].to_vec();
            events.push(event(bent, as_map));
            (batch(good), batch(events), Location::event(before, field))
        })
    })
}

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn a_bent_event_field_is_named_with_its_event(case in bent_batch()) {
        let (good, bent, at) = case;
        prop_assert!(decode_batch(&good).is_ok(), "{:?}", decode_batch(&good));
        let e = decode_batch(&bent).expect_err("a bent field is refused");
        prop_assert_eq!(location(&e), Some(at), "{}", e);
    }

    #[test]
    fn a_missing_map_field_or_a_short_array_is_named(
        drop in prop::sample::select(vec!["type", "block_hashes", "token_ids", "block_size"]),
        keep in 0usize..5,
        before in 0usize..3,
    ) {
        let valid = stored_fields(&[1, 2], &[7, 8, 9, 10], 2);
        let mut events: Vec<Mp> = (0..before).map(|_| event(valid.clone(), true)).collect();
        events.push(event(valid.iter().filter(|(f, _)| *f != drop).cloned().collect(), true));
        let e = decode_batch(&batch(events)).expect_err("a missing field");
        prop_assert_eq!(e, WireError::MissingField { at: Location::event(before, drop) });
        let short = event(valid[..keep].to_vec(), false);
        let e = decode_batch(&batch(vec![short])).expect_err("a short array");
        let at_event = Location::event(0, "event");
        let shape = matches!(e, WireError::EventShape { at, len, .. } if at == at_event && len == keep);
        prop_assert!(shape, "{}", e);
    }

    #[test]
    fn huge_declared_lengths_are_refused_without_allocating(
        n in any::<u32>(), tail in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut payload = vec![0x93, 0xcb];
        payload.extend(1.5f64.to_be_bytes());
        payload.push(0xdd);
        payload.extend(n.to_be_bytes());
        payload.extend(&tail);
        let result = decode_batch(&payload);
        if n as usize > MAX_EVENTS_PER_BATCH {
            let at = Location::batch("events");
            let cap = MAX_EVENTS_PER_BATCH;
            prop_assert_eq!(result, Err(WireError::TooLong { at, len: n as usize, cap }));
        } else if n as usize > tail.len() {
            prop_assert!(matches!(result, Err(WireError::Truncated { .. })), "{:?}", result);
        }
    }

    #[test]
    fn a_bent_load_stat_field_is_named(
        at in 1usize..11,
        bad in prop_oneof![
            Just(Mp::Str("3".into())),
            Just(Mp::F64(1.0)),
            Just(Mp::Bool(false)),
            (i64::MIN..0).prop_map(Mp::Int),
            Just(Mp::Arr(vec![])),
        ],
        values in prop::array::uniform10(any::<u32>()),
    ) {
        const FIELDS: [&str; 10] = [
            "num_running_reqs", "num_waiting_reqs", "num_tokens", "max_total_num_tokens", "attn_dp_rank",
            "num_waiting_uncached_tokens", "num_total_tokens", "max_running_requests",
            "total_prefill_uncached_tokens", "total_prefill_busy_us",
        ];
        let mut stat: Vec<Mp> = vec![Mp::Str("LoadStat".into())];
        stat.extend(values.iter().map(|v| Mp::UInt(u64::from(*v))));
        prop_assert!(decode_load_stat(&bytes(&Mp::Arr(stat.clone()))).is_ok());
        stat[at] = bad;
        match decode_load_stat(&bytes(&Mp::Arr(stat))) {
            Err(LoadStatError::Wire(e)) => {
                prop_assert_eq!(location(&e).map(|l| l.field), Some(FIELDS[at - 1]), "{}", e)
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

use proptest::prelude::*;

use super::*;

/// `LoadStat(3, 1, 300, 70000, 0, 5, 400, 1024, 9, 12345)` as SGLang 0.5.23's msgspec encodes it.
const GOLDEN_FULL: &str = "9ba84c6f6164537461740301cd012cce000111700005cd0190cd040009cd3039";
/// `LoadStat(3, 1, 300, 70000)`: the defaults, `attn_dp_rank` nil.
const GOLDEN_DEFAULTS: &str = "9ba84c6f6164537461740301cd012cce00011170c00000000000";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn full() -> LoadStat {
    LoadStat {
        num_running_reqs: 3,
        num_waiting_reqs: 1,
        num_tokens: 300,
        max_total_num_tokens: 70_000,
        attn_dp_rank: Some(0),
        num_waiting_uncached_tokens: 5,
        num_total_tokens: 400,
        max_running_requests: 1024,
        total_prefill_uncached_tokens: 9,
        total_prefill_busy_us: 12_345,
    }
}

/// `["LoadStat", values…]` with the given elements after the tag, each a msgpack value.
fn array(values: &[&[u8]]) -> Vec<u8> {
    let mut v = vec![0x90 | (values.len() as u8 + 1), 0xa8];
    v.extend_from_slice(LOAD_STAT_TAG.as_bytes());
    values.iter().for_each(|x| v.extend_from_slice(x));
    v
}

#[test]
fn goldens_decode_and_encode_byte_for_byte() {
    assert_eq!(decode_load_stat(&unhex(GOLDEN_FULL)).unwrap(), full());
    let defaults = LoadStat { attn_dp_rank: None, ..LoadStat::default() };
    let defaults = LoadStat {
        num_running_reqs: 3,
        num_waiting_reqs: 1,
        num_tokens: 300,
        max_total_num_tokens: 70_000,
        ..defaults
    };
    assert_eq!(decode_load_stat(&unhex(GOLDEN_DEFAULTS)).unwrap(), defaults);
    assert_eq!(encode_load_stat(&full()), unhex(GOLDEN_FULL));
    assert_eq!(encode_load_stat(&defaults), unhex(GOLDEN_DEFAULTS));
}

#[test]
fn the_six_element_prefix_and_appended_fields_decode() {
    let prefix = array(&[&[7], &[2], &[0xcd, 0x01, 0x00], &[0xcd, 0x10, 0x00], &[1]]);
    let s = decode_load_stat(&prefix).unwrap();
    assert_eq!(
        (s.num_running_reqs, s.num_waiting_reqs, s.num_tokens, s.max_total_num_tokens),
        (7, 2, 256, 4096)
    );
    assert_eq!((s.attn_dp_rank, s.num_total_tokens), (Some(1), 0));
    let required_only = array(&[&[7], &[2], &[3], &[4]]);
    assert_eq!(decode_load_stat(&required_only).unwrap().attn_dp_rank, None);
    // A future release appends a float, a string and a map: skipped.
    let mut longer = unhex(GOLDEN_FULL);
    longer[0] = 0x9e;
    longer.extend_from_slice(&[0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xa1, b'x', 0x81, 0xa1, b'k', 0x01]);
    assert_eq!(decode_load_stat(&longer).unwrap(), full());
}

#[test]
fn other_payloads_are_errors() {
    assert_eq!(decode_load_stat(&array(&[&[1], &[2], &[3]])), Err(LoadStatError::Short(4)));
    let mut other = unhex(GOLDEN_FULL);
    other[2] = b'X';
    assert!(matches!(decode_load_stat(&other), Err(LoadStatError::Tag(_))));
    let negative = array(&[&[0xff], &[2], &[3], &[4]]);
    assert!(matches!(decode_load_stat(&negative), Err(LoadStatError::Wire(WireError::OutOfRange { .. }))));
    let mut trailing = unhex(GOLDEN_FULL);
    trailing.push(0);
    assert!(matches!(
        decode_load_stat(&trailing),
        Err(LoadStatError::Wire(WireError::Trailing { count: 1 }))
    ));
    for bad in [&b""[..], &[0x90], &[0x80], &[0xc0], &[0x9b]] {
        assert!(decode_load_stat(bad).is_err(), "{bad:?}");
    }
}

fn any_stat() -> impl Strategy<Value = LoadStat> {
    (any::<[u64; 9]>(), proptest::option::of(any::<u32>())).prop_map(|(v, rank)| LoadStat {
        num_running_reqs: v[0],
        num_waiting_reqs: v[1],
        num_tokens: v[2],
        max_total_num_tokens: v[3],
        attn_dp_rank: rank,
        num_waiting_uncached_tokens: v[4],
        num_total_tokens: v[5],
        max_running_requests: v[6],
        total_prefill_uncached_tokens: v[7],
        total_prefill_busy_us: v[8],
    })
}

proptest! {
    #[test]
    fn encoded_stats_round_trip(stat in any_stat()) {
        prop_assert_eq!(decode_load_stat(&encode_load_stat(&stat)).unwrap(), stat);
    }

    #[test]
    fn truncated_stats_are_errors_not_panics(stat in any_stat(), cut in 0usize..64) {
        let bytes = encode_load_stat(&stat);
        let cut = cut.min(bytes.len() - 1);
        prop_assert!(decode_load_stat(&bytes[..cut]).is_err());
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_load_stat(&bytes);
    }

    #[test]
    fn mutated_stats_never_panic(stat in any_stat(), at in 0usize..64, byte in any::<u8>()) {
        let mut bytes = encode_load_stat(&stat);
        let at = at % bytes.len();
        bytes[at] = byte;
        let _ = decode_load_stat(&bytes);
    }
}

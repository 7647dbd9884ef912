//! `GET /v1/loads` bodies (`engine::loads::parse`) over arbitrary bytes and bodies mutated from
//! SGLang's shape: never a panic; valid ranks read back exactly; a count of the wrong type is an
//! error pointing at it; `decode_moments` of any shape reads as none unless it is six numbers.

use infera_control::engine::loads::{EngineLoad, parse};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Map, Value, json};

fn config(cases: u32) -> ProptestConfig {
    let persistence = FileFailurePersistence::Direct("proptest-regressions/loads_fuzz.txt");
    ProptestConfig { cases, failure_persistence: Some(Box::new(persistence)), ..ProptestConfig::default() }
}

/// The counts of a rank, top level then `disaggregation`, in [`EngineLoad`]'s terms.
const TOP: [&str; 4] = ["num_running_reqs", "num_waiting_reqs", "num_used_tokens", "max_total_num_tokens"];
const DISAGGREGATION: [&str; 5] = [
    "decode_prealloc_queue_reqs",
    "decode_transfer_queue_reqs",
    "decode_retracted_queue_reqs",
    "prefill_bootstrap_queue_reqs",
    "prefill_inflight_queue_reqs",
];

#[derive(Clone, Debug)]
struct Rank {
    dp_rank: u32,
    top: [Option<u64>; 4],
    disaggregation: Option<[Option<u64>; 5]>,
    moments: Value,
}

impl Rank {
    fn json(&self) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("dp_rank".into(), json!(self.dp_rank));
        o.insert("token_usage".into(), json!(0.25));
        for (k, v) in TOP.iter().zip(self.top) {
            if let Some(v) = v {
                o.insert((*k).into(), json!(v));
            }
        }
        if let Some(d) = self.disaggregation {
            let mut m = Map::from_iter([("mode".to_owned(), json!("decode"))]);
            m.extend(DISAGGREGATION.iter().zip(d).filter_map(|(k, v)| Some(((*k).to_owned(), json!(v?)))));
            o.insert("disaggregation".into(), Value::Object(m));
        }
        if !self.moments.is_null() || self.dp_rank.is_multiple_of(2) {
            o.insert("decode_moments".into(), self.moments.clone());
        }
        o
    }

    fn load(&self) -> EngineLoad {
        let [running, waiting, used_tokens, max_total_tokens] = self.top.map(Option::unwrap_or_default);
        let [prealloc_queue, transfer_queue, retracted, bootstrap_queue, inflight_queue] =
            self.disaggregation.unwrap_or_default().map(Option::unwrap_or_default);
        EngineLoad {
            running,
            waiting,
            prealloc_queue,
            transfer_queue,
            retracted,
            bootstrap_queue,
            inflight_queue,
            used_tokens,
            max_total_tokens,
        }
    }

    /// Six numbers (integers here, so that they read back exactly), or none.
    fn moments(&self) -> Option<[f64; 6]> {
        let a = self.moments.as_array().filter(|a| a.len() == 6)?;
        let v: Option<Vec<f64>> = a.iter().map(Value::as_f64).collect();
        <[f64; 6]>::try_from(v?).ok()
    }
}

fn moments() -> impl Strategy<Value = Value> {
    let number = prop_oneof![
        (0u32..1_000_000).prop_map(|n| json!(n)),
        Just(json!(null)),
        Just(json!("1")),
        Just(json!([]))
    ];
    prop_oneof![
        3 => prop::collection::vec((0u32..1_000_000).prop_map(|n| json!(n)), 6..=6).prop_map(Value::Array),
        1 => prop::collection::vec(number, 0..8).prop_map(Value::Array),
        1 => prop::sample::select(vec![json!(null), json!("x"), json!({"steps": 1}), json!(true), json!(3)]),
    ]
}

fn rank() -> impl Strategy<Value = Rank> {
    let count = proptest::option::weighted(0.8, any::<u64>());
    (
        any::<u32>(),
        prop::array::uniform4(count.clone()),
        proptest::option::of(prop::array::uniform5(count)),
        moments(),
    )
        .prop_map(|(dp_rank, top, disaggregation, moments)| Rank {
            dp_rank,
            top,
            disaggregation,
            moments,
        })
}

fn body(ranks: &[Rank]) -> Value {
    let loads: Vec<_> = ranks.iter().map(Rank::json).collect();
    json!({"timestamp": "2026-01-01T00:00:00+00:00", "version": "0.5.23", "loads": loads})
}

/// Not a count: the wrong type, negative, fractional, past u64, or null.
fn bad_count() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "\"3\"",
        "-1",
        "1.5",
        "1e30",
        "18446744073709551616",
        "null",
        "[]",
        "{}",
        "true",
    ])
}

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn sglangs_shape_reads_back_exactly(ranks in prop::collection::vec(rank(), 0..4)) {
        let text = body(&ranks).to_string();
        let parsed = parse(text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        prop_assert_eq!(parsed.len(), ranks.len());
        for (got, want) in parsed.iter().zip(&ranks) {
            prop_assert_eq!(got.rank, want.dp_rank);
            prop_assert_eq!(got.load, want.load());
            prop_assert_eq!(got.moments.map(|m| m.0), want.moments(), "{}", want.moments);
        }
    }

    #[test]
    fn a_bent_count_is_an_error_at_its_value(
        ranks in prop::collection::vec(rank(), 1..4), which in any::<prop::sample::Index>(),
        field in 0..TOP.len() + DISAGGREGATION.len(), bad in bad_count(),
    ) {
        let mut v = body(&ranks);
        let target = &mut v["loads"][which.index(ranks.len())];
        let slot = match field.checked_sub(TOP.len()) {
            None => &mut target[TOP[field]],
            Some(d) => {
                let o = target.as_object_mut().unwrap().entry("disaggregation").or_insert_with(|| json!({}));
                if o.is_null() {
                    *o = json!({});
                }
                &mut o[DISAGGREGATION[d]]
            }
        };
        *slot = json!("@bad@");
        let text = v.to_string();
        let start = text.find("\"@bad@\"").expect("the marker");
        let text = text.replacen("\"@bad@\"", bad, 1);
        let e = parse(text.as_bytes()).expect_err(&format!("{bad} is not a count: {text}")).to_string();
        let column: usize = e.rsplit("column ").next().and_then(|c| c.parse().ok()).expect("a column");
        prop_assert!(e.contains("line 1 "), "{e}");
        let at_the_value = (start..=start + bad.len() + 1).contains(&column);
        prop_assert!(at_the_value, "{e}: column {column}, value at {start}: {text}");
    }

    #[test]
    fn a_rank_without_dp_rank_is_an_error_naming_it(
        ranks in prop::collection::vec(rank(), 1..4), which in any::<prop::sample::Index>(),
    ) {
        let mut v = body(&ranks);
        v["loads"][which.index(ranks.len())].as_object_mut().unwrap().remove("dp_rank");
        let e = parse(v.to_string().as_bytes()).expect_err("no dp_rank").to_string();
        prop_assert!(e.contains("missing field `dp_rank`"), "{e}");
    }
}

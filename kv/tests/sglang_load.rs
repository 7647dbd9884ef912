//! SGLang's own `LoadStat` bytes (the 0.5.23 wheel's msgspec class, encoded by
//! `sglang_load_stat.py` next to this file) decode field by field, and our encoder (the sim's)
//! writes the same bytes; SGLang 0.5.18 has no load publisher at all.

use std::process::Command;

use infera_kv::load::{LOAD_TOPIC, LoadStat, decode_load_stat, encode_load_stat};
use infera_kv::testing::sglang_python;
use serde_json::{Value, json};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Runs the script under SGLang `version` with `readings`; its exit code and answer.
fn encode_with_sglang(version: &str, readings: &Value) -> (Option<i32>, Value) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sglang_load_stat.py");
    let out = Command::new(sglang_python(version)).arg(script).arg(readings.to_string()).output().unwrap();
    let answer = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), answer)
}

#[test]
fn sglang_0_5_23_load_stats_decode_field_by_field() {
    // Every msgpack width, a nil rank, and the prefixes SGLang's defaults allow.
    let readings = json!([
        [3, 1, 300, 70000, 0, 5, 400, 1024, 9, 12345],
        [0, 0, 0, 0],
        [127, 128, 65535, 65536, null],
        [1, 2, 3, 4, 7, 4294967296_u64, 9007199254740993_u64, 1, 18446744073709551615_u64, 0],
    ]);
    let (code, answer) = encode_with_sglang("0.5.23", &readings);
    assert_eq!(code, Some(0));
    assert_eq!(answer["version"], "0.5.23");
    assert_eq!(answer["topic"], LOAD_TOPIC);
    let payloads = answer["payloads"].as_array().unwrap();
    for (reading, hex) in readings.as_array().unwrap().iter().zip(payloads) {
        let fields: Vec<Option<u64>> = reading.as_array().unwrap().iter().map(Value::as_u64).collect();
        let field = |i: usize| fields.get(i).copied().flatten().unwrap_or(0);
        let expected = LoadStat {
            num_running_reqs: field(0),
            num_waiting_reqs: field(1),
            num_tokens: field(2),
            max_total_num_tokens: field(3),
            attn_dp_rank: fields.get(4).copied().flatten().map(|r| r as u32),
            num_waiting_uncached_tokens: field(5),
            num_total_tokens: field(6),
            max_running_requests: field(7),
            total_prefill_uncached_tokens: field(8),
            total_prefill_busy_us: field(9),
        };
        let bytes = unhex(hex.as_str().unwrap());
        assert_eq!(decode_load_stat(&bytes).unwrap(), expected, "{reading}");
        assert_eq!(encode_load_stat(&expected), bytes, "the sim writes SGLang's bytes for {reading}");
    }
}

#[test]
fn sglang_0_5_18_has_no_load_publisher() {
    let (code, answer) = encode_with_sglang("0.5.18", &json!([]));
    assert_eq!((code, &answer["version"]), (Some(3), &json!("0.5.18")));
}

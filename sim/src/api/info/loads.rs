//! `GET /v1/loads?include=…&dp_rank=…&format=…`: one entry per DP rank, as SGLang 0.5.23's
//! `get_loads` (python/sglang/srt/entrypoints/v1_loads.py) and the scheduler's
//! `LoadInquirer` (python/sglang/srt/managers/scheduler_components/load_inquirer.py) answer it,
//! as JSON or, with `format=prometheus`, as Prometheus text (`_format_loads_prometheus`).

use std::time::UNIX_EPOCH;

use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::disaggregation::DisaggregationMode;
use crate::scheduler::RankSnapshot;
use crate::server::{self, Body};

/// `include` sections.
const SECTIONS: [&str; 7] = ["core", "memory", "spec", "lora", "disagg", "queues", "all"];

/// The query, parsed.
struct Query {
    include: Vec<String>,
    only_rank: Option<usize>,
    prometheus: bool,
}

/// A query SGLang refuses.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// A `dp_rank` that is not an integer (the value given).
    Rank(String),
    /// An unknown `include` section.
    Section,
}

impl Refused {
    /// SGLang's answer: FastAPI's validation envelope for the rank; a bare 500 for a section,
    /// which 0.5.23 fails inside its scheduler.
    fn response(&self) -> Response<Body> {
        match self {
            Refused::Rank(value) => {
                let message = format!(
                    "1 validation error:\n  {{'type': 'int_parsing', 'loc': ('query', 'dp_rank'), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': '{value}'}}"
                );
                let body = json!({"object": "error", "message": message, "type": "Bad Request", "param": null, "code": 400});
                server::json(StatusCode::BAD_REQUEST, &body)
            }
            Refused::Section => server::text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
        }
    }
}

fn parse(query: &str) -> Result<Query, Refused> {
    let mut q = Query { include: vec!["all".to_owned()], only_rank: None, prometheus: false };
    for (key, value) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        match key {
            "include" => {
                q.include = value
                    .split([',', '+'])
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            "dp_rank" => match value.parse::<usize>() {
                Ok(r) => q.only_rank = Some(r),
                Err(_) => return Err(Refused::Rank(value.to_owned())),
            },
            "format" => q.prometheus = value == "prometheus",
            _ => {}
        }
    }
    if q.include.iter().any(|s| !SECTIONS.contains(&s.as_str())) {
        return Err(Refused::Section);
    }
    Ok(q)
}

/// Serves the route.
pub(in crate::api) fn loads(app: &App, query: &str) -> Response<Body> {
    let q = match parse(query) {
        Ok(q) => q,
        Err(refused) => return refused.response(),
    };
    // The scheduler's time of the snapshot (frozen while it hangs), as SGLang stamps it.
    let now = app.engine.snapshot_time().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let loads: Vec<Value> = app
        .engine
        .snapshot()
        .iter()
        .enumerate()
        .filter(|(rank, _)| q.only_rank.is_none_or(|r| r == *rank))
        .map(|(rank, s)| entry(app, &q.include, now, rank, s))
        .collect();
    if q.prometheus {
        let body = prometheus(&loads);
        return server::typed(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", body);
    }
    let c = &app.config;
    // `_num_accelerators_per_dp_rank`: TP × PP, split over the ranks under DP attention.
    let accelerators = if c.attention_dp { (c.tp_size / c.ranks.max(1)).max(1) } else { c.tp_size };
    let body = json!({
        "timestamp": iso8601(now),
        "version": c.sglang_version,
        "accelerator": c.params.device.name,
        "num_accelerators": accelerators,
        "loads": loads,
    });
    server::json(StatusCode::OK, &body)
}

/// One rank's entry.
fn entry(app: &App, include: &[String], now: f64, rank: usize, s: &RankSnapshot) -> Value {
    let c = &app.config;
    let has = |section: &str| include.iter().any(|i| i == section || i == "all");
    let capacity = c.pool.max_total_num_tokens;
    let decode = c.mode == DisaggregationMode::Decode;
    let mut e = Map::new();
    e.insert("timestamp".into(), json!(now));
    e.insert("dp_rank".into(), json!(rank));
    e.insert("num_running_reqs".into(), json!(s.running));
    // A decode counts its prealloc, transfer and retracted queues as waiting (load_inquirer.py).
    let queued = if decode { s.prealloc + s.transfer + s.retracted } else { 0 };
    e.insert("num_waiting_reqs".into(), json!(s.waiting + queued));
    e.insert("num_waiting_uncached_tokens".into(), json!(s.waiting_uncached_tokens));
    e.insert("num_used_tokens".into(), json!(s.used_tokens));
    let total = s.used_tokens + s.pending_tokens;
    e.insert("num_total_tokens".into(), json!(total));
    e.insert("num_active_tokens".into(), json!(total.saturating_sub(s.awaiting_kv_tokens)));
    e.insert("num_prealloc_ready_tokens".into(), json!(s.prealloc_tokens));
    e.insert("max_total_num_tokens".into(), json!(capacity));
    e.insert("max_running_requests".into(), json!(c.max_running_requests));
    e.insert("token_usage".into(), json!(round4(s.used_tokens as f64 / capacity.max(1) as f64)));
    e.insert("gen_throughput".into(), json!(0.0));
    e.insert("cache_hit_rate".into(), json!(0.0));
    let utilization = f64::from(s.running) / f64::from(c.max_running_requests.max(1));
    e.insert("utilization".into(), json!(round4(utilization.min(1.0))));
    e.insert("total_prefill_uncached_tokens".into(), json!(0));
    e.insert("total_prefill_busy_us".into(), json!(0));
    e.insert("decode_moments".into(), s.decode_moments.map_or(Value::Null, |m| json!(m)));
    if has("memory") {
        let memory = json!({"weight_gb": round3(c.pool.weight_gib), "kv_cache_gb": round3(c.pool.kv_cache_gib),
            "graph_gb": 0.0, "token_capacity": capacity});
        e.insert("memory".into(), memory);
    }
    if has("spec") && c.speculative.algorithm.is_some() {
        e.insert("speculative".into(), json!({ "accept_length": c.params.mtp_acceptance }));
    }
    if has("disagg") {
        let (prefill_inflight, decode_transfer) =
            if c.mode == DisaggregationMode::Prefill { (s.transfer, 0) } else { (0, s.transfer) };
        e.insert("disaggregation".into(), json!({
            "mode": c.mode.as_str(), "prefill_bootstrap_queue_reqs": 0,
            "prefill_inflight_queue_reqs": prefill_inflight, "decode_prealloc_queue_reqs": s.prealloc,
            "decode_transfer_queue_reqs": decode_transfer, "decode_retracted_queue_reqs": s.retracted,
            "kv_transfer_speed_gb_s": if c.mode == DisaggregationMode::Null { 0.0 } else { c.params.kv_bandwidth_bytes_per_s / 1e9 },
            "kv_transfer_latency_ms": 0.0,
        }));
    }
    if has("queues") {
        let queues = json!({"waiting": s.waiting, "grammar": 0, "paused": 0, "retracted": s.retracted_last,
            "prealloc_ready": s.prealloc});
        e.insert("queues".into(), queues);
    }
    Value::Object(e)
}

/// SGLang rounds `token_usage` and `utilization` to 4 decimals (`LoadInquirer`).
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// SGLang rounds its memory figures to 3 decimals.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `_format_loads_prometheus`: a gauge per numeric field (`sglang_<key>`) and per numeric field
/// of a section (`sglang_<section>_<key>`, `spec` and `disagg` for the long names), one sample
/// per rank labelled `dp_rank`.
fn prometheus(loads: &[Value]) -> String {
    let mut metrics: Vec<(String, Vec<(Value, String)>)> = Vec::new();
    let mut add = |name: String, rank: &Value, v: &Value| {
        let Some(text) = number_text(v) else { return };
        match metrics.iter_mut().find(|(n, _)| *n == name) {
            Some((_, samples)) => samples.push((rank.clone(), text)),
            None => metrics.push((name, vec![(rank.clone(), text)])),
        }
    };
    for load in loads {
        let Value::Object(fields) = load else { continue };
        let rank = fields.get("dp_rank").cloned().unwrap_or(Value::Null);
        for (key, value) in fields.iter().filter(|(k, _)| *k != "dp_rank") {
            match value {
                Value::Object(section) => {
                    let prefix = match key.as_str() {
                        "speculative" => "spec",
                        "disaggregation" => "disagg",
                        other => other,
                    };
                    for (sub, v) in section {
                        add(format!("sglang_{prefix}_{sub}"), &rank, v);
                    }
                }
                v => add(format!("sglang_{key}"), &rank, v),
            }
        }
    }
    let mut out = String::new();
    for (name, samples) in metrics {
        out.push_str(&format!("# TYPE {name} gauge\n"));
        for (rank, value) in samples {
            out.push_str(&format!("{name}{{dp_rank=\"{rank}\"}} {value}\n"));
        }
    }
    out
}

/// A JSON number as Python prints it (`0.0` for a float, `3` for an int); `None` otherwise.
fn number_text(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) if n.is_f64() => n
            .as_f64()
            .map(|f| if f.fract() == 0.0 && f.abs() < 1e16 { format!("{f:.1}") } else { format!("{f}") }),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `2026-08-07T12:00:00.000000+00:00` for Unix seconds (Python's `isoformat()`).
fn iso8601(unix: f64) -> String {
    let secs = unix.floor() as i64;
    let micros = ((unix - unix.floor()) * 1e6) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{micros:06}+00:00")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_as_python_does() {
        assert_eq!(iso8601(0.0), "1970-01-01T00:00:00.000000+00:00");
        assert_eq!(iso8601(1_786_104_000.25), "2026-08-07T12:00:00.250000+00:00");
    }

    #[test]
    fn prometheus_text_has_a_gauge_per_numeric_field_and_rank() {
        let loads = [
            json!({"dp_rank": 0, "num_running_reqs": 2, "token_usage": 0.0, "decode_moments": null,
                   "disaggregation": {"mode": "decode", "decode_prealloc_queue_reqs": 1}}),
            json!({"dp_rank": 1, "num_running_reqs": 3, "token_usage": 0.5, "decode_moments": null,
                   "disaggregation": {"mode": "decode", "decode_prealloc_queue_reqs": 0}}),
        ];
        let text = prometheus(&loads);
        let expected = "# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank=\"0\"} 2\n\
            sglang_num_running_reqs{dp_rank=\"1\"} 3\n# TYPE sglang_token_usage gauge\n\
            sglang_token_usage{dp_rank=\"0\"} 0.0\nsglang_token_usage{dp_rank=\"1\"} 0.5\n\
            # TYPE sglang_disagg_decode_prealloc_queue_reqs gauge\n\
            sglang_disagg_decode_prealloc_queue_reqs{dp_rank=\"0\"} 1\n\
            sglang_disagg_decode_prealloc_queue_reqs{dp_rank=\"1\"} 0\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn bad_queries_answer_as_sglang_does() {
        let nan = parse("dp_rank=x").err().unwrap();
        assert_eq!(nan, Refused::Rank("x".into()));
        assert_eq!(nan.response().status(), StatusCode::BAD_REQUEST);
        let bogus = parse("include=core,bogus").err().unwrap();
        assert_eq!(bogus.response().status(), StatusCode::INTERNAL_SERVER_ERROR);
        let q = parse("include=core, memory&dp_rank=1&format=prometheus").ok().unwrap();
        assert_eq!((q.only_rank, q.prometheus), (Some(1), true));
    }
}

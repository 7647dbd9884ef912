//! Read-only endpoints routers call: `/server_info`, `/model_info`, `/v1/models`, `/v1/loads`,
//! in the shapes SGLang serves them for the emulated version (`--sim-sglang-version`; SGLang 0.5.23
//! python/sglang/srt/entrypoints/http_server.py and entrypoints/v1_loads.py); `manual/reference/sim.md`
//! lists the keys.

use std::time::UNIX_EPOCH;

use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::config::{DisaggregationMode, SimConfig};
use crate::server::{self, Body};

/// `include` sections of `/v1/loads`.
const SECTIONS: [&str; 7] = ["core", "memory", "spec", "lora", "disagg", "queues", "all"];

/// Whether the emulated version is at least `want` (unparsable versions count as newest).
fn at_least(version: &str, want: [u32; 3]) -> bool {
    let parts: Vec<u32> = version.split(['.', '-', '+']).take(3).map_while(|p| p.parse().ok()).collect();
    if parts.len() < 3 {
        return true;
    }
    parts[..3] >= want[..]
}

/// `GET /server_info`.
pub(super) fn server_info(app: &App) -> Value {
    let c = &app.config;
    let new_dp = at_least(&c.sglang_version, [0, 5, 22]);
    let (dp_size, attn_dp_size) = match (new_dp, c.attention_dp) {
        (true, true) => (1, c.ranks),
        _ => (c.ranks, 1),
    };
    let snapshot = app.engine.snapshot();
    let mut info = json!({
        "model_path": c.model_path,
        "served_model_name": c.served_model_name,
        "tokenizer_path": c.model_path,
        "host": c.host,
        "port": c.port,
        "tp_size": c.tp_size,
        "pp_size": 1,
        "dp_size": dp_size,
        "enable_dp_attention": if new_dp { c.ranks > 1 && c.attention_dp } else { c.attention_dp },
        "load_balance_method": c.load_balance_method,
        "disaggregation_mode": c.mode.as_str(),
        "disaggregation_bootstrap_port": c.bootstrap_port,
        "disaggregation_transfer_backend": "mooncake",
        "page_size": c.page_size,
        "chunked_prefill_size": c.chunk_tokens,
        "schedule_policy": c.schedule_policy,
        "max_running_requests": c.max_running_requests,
        "context_length": c.context_length,
        "speculative_algorithm": c.speculative.algorithm,
        "speculative_num_steps": c.speculative.num_steps,
        "speculative_eagle_topk": c.speculative.eagle_topk,
        "speculative_num_draft_tokens": c.speculative.num_draft_tokens,
        "cuda_graph_max_bs_decode": c.cuda_graph_max_bs_decode,
        "enable_metrics": c.enable_metrics,
        "kv_events_config": c.kv_events_config,
        "max_total_num_tokens": capacity(app),
        "max_req_input_len": c.context_length.saturating_sub(5),
        "kv_events": app.kv_events.as_ref().map(|k| {
            let mut d = k.describe(c.page_size, c.ranks, at_least(&c.sglang_version, [0, 5, 22]));
            // SGLang 0.5.23 `describe_kv_events_publisher` (python/sglang/srt/runtime_context.py).
            if let Some(port) = app.load_port_base {
                d["load_endpoint_port_base"] = json!(port);
                d["load_topic"] = json!(infera_kv::load::LOAD_TOPIC);
            }
            d
        }),
        "version": c.sglang_version,
        "internal_states": snapshot.iter().enumerate().map(|(rank, s)| json!({
            "dp_rank": rank,
            "last_gen_throughput": 0.0,
            "num_running_reqs": s.running,
            "num_waiting_reqs": s.waiting,
            "avg_spec_accept_length": c.params.mtp_acceptance,
        })).collect::<Vec<_>>(),
    });
    if new_dp {
        info["attn_dp_size"] = json!(attn_dp_size);
    }
    if at_least(&c.sglang_version, [0, 5, 21]) {
        info["frontend"] = json!("python");
    }
    if c.ranks == 1 {
        info["status"] = json!("ready");
    }
    if let Value::Object(keys) = &mut info {
        for (key, value) in &c.server_info_override {
            match value {
                Value::Null => keys.remove(key),
                v => keys.insert(key.clone(), v.clone()),
            };
        }
    }
    info
}

/// `max_total_num_tokens`: each DP rank's KV pool as [`crate::kv_pool`] sized it — from the
/// model, the device memory and `--mem-fraction-static`, capped by `--max-total-tokens` — on
/// every role, as SGLang always knows its pool.
pub(crate) fn reported_kv_capacity(c: &SimConfig) -> u64 {
    c.pool.max_total_num_tokens
}

fn capacity(app: &App) -> u64 {
    reported_kv_capacity(&app.config)
}

/// `GET /model_info`.
pub(super) fn model_info(app: &App) -> Value {
    let c = &app.config;
    json!({
        "model_path": c.model_path,
        "served_model_name": c.served_model_name,
        "tokenizer_path": c.model_path,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": null,
        "tool_call_parser": null,
        "disaggregation_mode": c.mode.as_str(),
        "has_image_understanding": false,
        "has_audio_understanding": false,
        "model_type": "infera-sim",
        "architectures": ["InferaSimForCausalLM"],
    })
}

/// `GET /v1/models`.
pub(super) fn models(app: &App) -> Value {
    let name = &app.config.served_model_name;
    json!({ "object": "list", "data": [{
        "id": name, "object": "model", "created": app.created, "owned_by": "sglang", "root": name,
        "parent": null, "max_model_len": app.config.context_length,
    }]})
}

/// `GET /v1/loads?include=…&dp_rank=…`: one entry per DP rank.
pub(super) fn loads(app: &App, query: &str) -> Response<Body> {
    let mut include = vec!["all".to_owned()];
    let mut only_rank = None;
    for (key, value) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        match key {
            "include" => {
                include = value.split([',', '+']).filter(|s| !s.is_empty()).map(str::to_owned).collect()
            }
            "dp_rank" => match value.parse::<usize>() {
                Ok(r) => only_rank = Some(r),
                Err(_) => return bad_request(format!("invalid dp_rank {value:?}")),
            },
            _ => {}
        }
    }
    if let Some(bad) = include.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
        return bad_request(format!(
            "invalid include value {bad:?}; expected a comma list of {}",
            SECTIONS.join(", ")
        ));
    }
    let has = |s: &str| include.iter().any(|i| i == s || i == "all");
    let c = &app.config;
    // The scheduler's time of the snapshot (frozen while it hangs), as SGLang stamps it.
    let now = app.engine.snapshot_time().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let capacity = capacity(app);
    let decode = c.mode == DisaggregationMode::Decode;
    let loads: Vec<Value> = app
        .engine
        .snapshot()
        .iter()
        .enumerate()
        .filter(|(rank, _)| only_rank.is_none_or(|r| r == *rank))
        .map(|(rank, s)| {
            let mut e = Map::new();
            e.insert("timestamp".into(), json!(now));
            e.insert("dp_rank".into(), json!(rank));
            e.insert("num_running_reqs".into(), json!(s.running));
            // A decode counts its prealloc, transfer and retracted queues as waiting
            // (SGLang 0.5.23 python/sglang/srt/managers/scheduler_components/load_inquirer.py).
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
            e.insert("token_usage".into(), json!(s.used_tokens as f64 / capacity.max(1) as f64));
            e.insert("gen_throughput".into(), json!(0.0));
            e.insert("cache_hit_rate".into(), json!(0.0));
            e.insert("utilization".into(), json!(f64::from(s.running) / f64::from(c.max_running_requests.max(1))));
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
            if has("disagg") && c.mode != DisaggregationMode::Null {
                let (prefill_inflight, decode_transfer) =
                    if c.mode == DisaggregationMode::Prefill { (s.transfer, 0) } else { (0, s.transfer) };
                e.insert("disaggregation".into(), json!({
                    "mode": c.mode.as_str(), "prefill_bootstrap_queue_reqs": 0,
                    "prefill_inflight_queue_reqs": prefill_inflight, "decode_prealloc_queue_reqs": s.prealloc,
                    "decode_transfer_queue_reqs": decode_transfer, "decode_retracted_queue_reqs": s.retracted,
                    "kv_transfer_speed_gb_s": c.params.kv_bandwidth_bytes_per_s / 1e9, "kv_transfer_latency_ms": 0.0,
                }));
            }
            if has("queues") {
                let queues = json!({"waiting": s.waiting, "grammar": 0, "paused": 0, "retracted": s.retracted_last,
                    "prealloc_ready": s.prealloc});
                e.insert("queues".into(), queues);
            }
            Value::Object(e)
        })
        .collect();
    let body = json!({
        "timestamp": iso8601(now),
        "version": c.sglang_version,
        "accelerator": "infera-sim",
        "num_accelerators": c.tp_size,
        "loads": loads,
    });
    server::json(StatusCode::OK, &body)
}

/// SGLang rounds its memory figures to 3 decimals.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn bad_request(message: String) -> Response<Body> {
    server::json(StatusCode::BAD_REQUEST, &json!({ "error": { "message": message } }))
}

/// `2026-08-07T12:00:00+00:00` for Unix seconds.
fn iso8601(unix: f64) -> String {
    let secs = unix as i64;
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
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}+00:00")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_dates() {
        assert!(at_least("0.5.23", [0, 5, 22]));
        assert!(!at_least("0.5.21", [0, 5, 22]));
        assert!(at_least("0.6.0rc1", [0, 5, 22]) || at_least("0.6.0", [0, 5, 22]));
        assert_eq!(iso8601(0.0), "1970-01-01T00:00:00+00:00");
        assert_eq!(iso8601(1_786_104_000.0), "2026-08-07T12:00:00+00:00");
    }
}

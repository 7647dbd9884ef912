//! Read-only endpoints routers call: `/server_info`, `/model_info`, `/v1/models`,
//! `/v1/models/{id}`, `/v1/loads`, in the shapes SGLang serves them for the emulated version
//! (`--sim-sglang-version`; SGLang 0.5.23 python/sglang/srt/entrypoints/http_server.py and
//! entrypoints/v1_loads.py); `manual/reference/sim.md` lists the keys.

mod loads;
mod server_info;

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

pub(super) use loads::loads;

use crate::app::App;
use crate::config::SimConfig;

/// Whether the emulated version is at least `want` (unparsable versions count as newest).
pub(crate) fn at_least(version: &str, want: [u32; 3]) -> bool {
    let parts: Vec<u32> = version.split(['.', '-', '+']).take(3).map_while(|p| p.parse().ok()).collect();
    if parts.len() < 3 {
        return true;
    }
    parts[..3] >= want[..]
}

/// Unix seconds now (SGLang stamps `created` when it answers).
fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `/server_info.kv_events`: SGLang's descriptor (`describe_kv_events_publisher` in
/// python/sglang/srt/runtime_context.py), or null.
fn kv_events_descriptor(app: &App) -> Value {
    let c = &app.config;
    app.kv_events.as_ref().map_or(Value::Null, |k| {
        let mut d = k.describe(c.page_size, c.ranks, at_least(&c.sglang_version, [0, 5, 22]));
        if let Some(port) = app.load_port_base {
            d["load_endpoint_port_base"] = json!(port);
            d["load_topic"] = json!(infera_kv::load::LOAD_TOPIC);
        }
        d
    })
}

/// `GET /server_info`, with `--sim-server-info-override` applied.
pub(super) fn server_info(app: &App) -> Value {
    let mut info = if server_info::reports_full_record(&app.config) {
        server_info::full(app)
    } else {
        legacy_server_info(app)
    };
    if let Value::Object(keys) = &mut info {
        for (key, value) in &app.config.server_info_override {
            match value {
                Value::Null => keys.remove(key),
                v => keys.insert(key.clone(), v.clone()),
            };
        }
    }
    info
}

/// `/server_info` before 0.5.23: the keys routers read.
fn legacy_server_info(app: &App) -> Value {
    let c = &app.config;
    let new_dp = at_least(&c.sglang_version, [0, 5, 22]);
    let (dp_size, attn_dp_size) = match (new_dp, c.attention_dp) {
        (true, true) => (1, c.ranks),
        _ => (c.ranks, 1),
    };
    let snapshot = app.engine.snapshot();
    let args = server_info::server_args(app);
    let pick = |k: &str| args.get(k).cloned().unwrap_or(Value::Null);
    let mut info = json!({
        "model_path": c.model_path,
        "served_model_name": c.served_model_name,
        "tokenizer_path": c.tokenizer_path,
        "host": c.host,
        "port": c.port,
        "tp_size": c.tp_size,
        "pp_size": 1,
        "dp_size": dp_size,
        "enable_dp_attention": if new_dp { c.ranks > 1 && c.attention_dp } else { c.attention_dp },
        "load_balance_method": pick("load_balance_method"),
        "disaggregation_mode": c.mode.as_str(),
        "disaggregation_bootstrap_port": c.bootstrap_port,
        "disaggregation_transfer_backend": "mooncake",
        "page_size": c.page_size,
        "chunked_prefill_size": pick("chunked_prefill_size"),
        "schedule_policy": c.schedule_policy,
        "max_running_requests": c.max_running_requests_flag,
        "context_length": c.context_length_flag,
        "is_embedding": c.is_embedding,
        "speculative_algorithm": c.speculative.algorithm,
        "speculative_num_steps": c.speculative.num_steps,
        "speculative_eagle_topk": c.speculative.eagle_topk,
        "speculative_num_draft_tokens": c.speculative.num_draft_tokens,
        "cuda_graph_max_bs_decode": c.cuda_graph_max_bs_decode,
        "enable_metrics": c.enable_metrics,
        "kv_events_config": c.kv_events_config,
        "max_total_num_tokens": c.pool.max_total_num_tokens,
        "max_req_input_len": c.pool.max_req_input_len,
        "kv_events": kv_events_descriptor(app),
        "version": c.sglang_version,
        "status": "ready",
        "internal_states": snapshot.iter().map(|_| json!({
            "last_gen_throughput": 0.0,
            "effective_max_running_requests_per_dp": c.max_running_requests,
        })).collect::<Vec<_>>(),
    });
    if new_dp {
        info["attn_dp_size"] = json!(attn_dp_size);
    }
    if at_least(&c.sglang_version, [0, 5, 21]) {
        info["frontend"] = json!("python");
    }
    info
}

/// `max_total_num_tokens`: each DP rank's KV pool as [`crate::kv_pool`] sized it — from the
/// model, the device memory and `--mem-fraction-static`, capped by `--max-total-tokens` — on
/// every role, as SGLang always knows its pool.
pub(crate) fn reported_kv_capacity(c: &SimConfig) -> u64 {
    c.pool.max_total_num_tokens
}

/// `GET /model_info`.
pub(super) fn model_info(app: &App) -> Value {
    let c = &app.config;
    let mut info = json!({
        "model_path": c.model_path,
        "served_model_name": c.served_model_name,
        "tokenizer_path": c.tokenizer_path,
        "is_generation": c.generates(),
        "preferred_sampling_params": null,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": null,
        "tool_call_parser": null,
        "disaggregation_mode": c.mode.as_str(),
        "has_image_understanding": false,
        "has_audio_understanding": false,
        "model_type": c.model.model_type,
        "architectures": c.model.architectures,
    });
    if server_info::reports_full_record(c) {
        info["embedding"] = server_info::embedding(c);
    }
    info
}

/// One model card (`ModelCard` in python/sglang/srt/entrypoints/openai/protocol.py).
fn model_card(app: &App) -> Value {
    let name = &app.config.served_model_name;
    json!({
        "id": name, "object": "model", "created": now_secs(), "owned_by": "sglang", "root": name,
        "parent": null, "max_model_len": app.config.context_length,
    })
}

/// `GET /v1/models`.
pub(super) fn models(app: &App) -> Value {
    json!({ "object": "list", "data": [model_card(app)] })
}

/// `GET /v1/models/{id}`: the card, or SGLang's 404 (`retrieve_model`).
pub(super) fn model(app: &App, id: &str) -> (hyper::StatusCode, Value) {
    if id == app.config.served_model_name {
        return (hyper::StatusCode::OK, model_card(app));
    }
    let error = json!({"error": {
        "message": format!("The model '{id}' does not exist"),
        "type": "invalid_request_error", "param": "model", "code": "model_not_found",
    }});
    (hyper::StatusCode::NOT_FOUND, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_release() {
        assert!(at_least("0.5.23", [0, 5, 22]));
        assert!(!at_least("0.5.21", [0, 5, 22]));
        assert!(at_least("0.6.0rc1", [0, 5, 22]) || at_least("0.6.0", [0, 5, 22]));
    }
}

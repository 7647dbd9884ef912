//! `GET /server_info`: SGLang 0.5.23 answers with its whole resolved `ServerArgs` (546 keys),
//! then the launch command, the scheduler's facts and one internal state per DP rank
//! (`python/sglang/srt/entrypoints/http_server.py`, `server_info`; `utils/common.py`,
//! `build_server_info`; `managers/scheduler_components/internal_state.py`,
//! `get_internal_state`). The sim starts from a captured record of a real 0.5.23 server's
//! arguments (`sglang_flags/0.5.23.server_info.json`: the keys the sim does not model keep
//! that server's resolved values; those its capture's launch flags set are back at their
//! defaults), overlays what it models and the SGLang flags it was given, and adds the runtime
//! keys. Older emulated versions get the keys routers read, as before.

use serde_json::{Map, Value, json};

use super::at_least;
use crate::app::App;
use crate::config::SimConfig;
use crate::disaggregation::DisaggregationMode;

/// The captured record: `server_args` and `/model_info`'s `embedding`.
const TEMPLATE: &str = include_str!("../../sglang_flags/0.5.23.server_info.json");

/// The graph phases SGLang reports memory for (`memory_usage.graph`, `startup_time.cuda_graph`).
const GRAPH_PHASES: [&str; 6] =
    ["prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"];

fn template() -> Map<String, Value> {
    match serde_json::from_str::<Value>(TEMPLATE) {
        Ok(Value::Object(mut t)) => match t.remove("server_args") {
            Some(Value::Object(args)) => args,
            _ => Map::new(),
        },
        _ => Map::new(),
    }
}

/// `/model_info`'s `embedding` plan, as 0.5.23 reports it for a generation model, with
/// `enabled` set by `--is-embedding` (`resolved_embedding_plan` in
/// python/sglang/srt/configs/embedding_model_spec.py).
pub(super) fn embedding(c: &SimConfig) -> Value {
    let mut plan = serde_json::from_str::<Value>(TEMPLATE)
        .ok()
        .and_then(|mut t| t.get_mut("embedding").map(Value::take))
        .unwrap_or(Value::Null);
    if let Some(enabled) = plan.get_mut("enabled") {
        *enabled = json!(c.is_embedding);
    }
    plan
}

/// The resolved `--load-balance-method`: `auto` is `follow_bootstrap_room` on a prefill,
/// `round_robin` elsewhere (SGLang resolves it before publishing).
fn load_balance_method(c: &SimConfig) -> &str {
    match (c.load_balance_method.as_str(), c.mode) {
        ("auto", DisaggregationMode::Prefill) => "follow_bootstrap_room",
        ("auto", _) => "round_robin",
        (other, _) => other,
    }
}

/// The SGLang arguments as SGLang 0.5.23 reports them.
pub(super) fn server_args(app: &App) -> Map<String, Value> {
    let c = &app.config;
    let mut a = template();
    // SGLang flags the sim drops, as given, typed like the record's value.
    for tokens in &c.inert_flags {
        overlay_flag(&mut a, tokens);
    }
    let (dp_size, attn_dp_size) = if c.attention_dp { (1, c.ranks) } else { (c.ranks, 1) };
    let modeled = json!({
        "model_path": c.model_path,
        "tokenizer_path": c.tokenizer_path,
        "served_model_name": c.served_model_name,
        "host": c.host,
        "port": c.port,
        "context_length": c.context_length_flag,
        "is_embedding": c.is_embedding,
        "mem_fraction_static": c.pool.mem_fraction_static,
        "max_running_requests": c.max_running_requests_flag,
        "max_total_tokens": c.max_total_tokens_flag,
        "chunked_prefill_size": if c.chunk_tokens == u32::MAX { json!(-1) } else { json!(c.chunk_tokens) },
        "schedule_policy": c.schedule_policy,
        "page_size": c.page_size,
        "tp_size": c.tp_size,
        "dp_size": dp_size,
        "attn_dp_size": attn_dp_size,
        "load_balance_method": load_balance_method(c),
        "enable_dp_attention": c.ranks > 1 && c.attention_dp,
        "random_seed": app.seed % (1 << 30),
        "enable_cache_report": c.cache_report,
        "enable_metrics": c.enable_metrics,
        "kv_events_config": c.kv_events_config,
        "speculative_algorithm": c.speculative.algorithm,
        "speculative_num_steps": c.speculative.num_steps,
        "speculative_eagle_topk": c.speculative.eagle_topk,
        "speculative_num_draft_tokens": c.speculative.num_draft_tokens,
        "cuda_graph_max_bs_decode": c.cuda_graph_max_bs_decode,
        "disaggregation_mode": c.mode.as_str(),
        "disaggregation_bootstrap_port": c.bootstrap_port,
        "num_reserved_decode_tokens": c.kv.reserved_decode_tokens,
    });
    if let Value::Object(m) = modeled {
        for (k, v) in m {
            a.insert(k, v);
        }
    }
    if c.mode == DisaggregationMode::Decode {
        // A decode resolves these for its role (no radix cache, no HiCache ratio).
        a.insert("disable_radix_cache".into(), json!(true));
        a.insert("hicache_ratio".into(), Value::Null);
        a.insert("disaggregation_decode_extra_slots".into(), json!(0));
    }
    a
}

/// Sets the record's key for one SGLang flag (`--x-y v` → `x_y`), typed like the record's
/// value there: a switch is `true`, several values a list; unknown keys are left alone.
fn overlay_flag(a: &mut Map<String, Value>, tokens: &[String]) {
    let Some(flag) = tokens.first().and_then(|t| t.strip_prefix("--")) else { return };
    let (name, inline) = match flag.split_once('=') {
        Some((n, v)) => (n, Some(v.to_owned())),
        None => (flag, None),
    };
    let key = name.replace('-', "_");
    let Some(current) = a.get(&key) else { return };
    let values: Vec<String> = inline.into_iter().chain(tokens[1..].iter().cloned()).collect();
    let typed = |v: &str| match current {
        Value::String(_) => Value::String(v.to_owned()),
        _ => serde_json::from_str::<Value>(v)
            .ok()
            .filter(|x| x.is_number() || x.is_boolean())
            .unwrap_or_else(|| Value::String(v.to_owned())),
    };
    let value = match values.as_slice() {
        [] => Value::Bool(true),
        [one] if !current.is_array() => typed(one),
        many => Value::Array(many.iter().map(|v| typed(v)).collect()),
    };
    a.insert(key, value);
}

/// `startup_time` (seconds; the sim starts at once).
fn startup_time(tokenizer: bool) -> Value {
    let graphs: Map<String, Value> = GRAPH_PHASES.iter().map(|p| ((*p).to_owned(), json!(0.0))).collect();
    let mut t =
        json!({"load_weight": 0.0, "kv_cache_allocation": 0.0, "scheduler_e2e": 0.0, "cuda_graph": graphs});
    if tokenizer {
        t["tokenizer_e2e"] = json!(0.0);
    }
    t
}

/// One DP rank's internal state: the arguments, then what the scheduler adds.
fn internal_state(app: &App, args: &Map<String, Value>) -> Value {
    let c = &app.config;
    let mut s = args.clone();
    s.remove("custom_sigquit_handler");
    // The scheduler's resolved view differs from the published one in these keys.
    s.insert("disable_chunked_prefix_cache".into(), json!(true));
    s.insert("pp_max_micro_batch_size".into(), json!(c.max_running_requests));
    for (key, default) in
        [("disaggregation_decode_retraction_backup", json!("cpu_tensor")), ("hicache_ratio", json!(2.0))]
    {
        if s.get(key).is_some_and(Value::is_null) {
            s.insert(key.into(), default);
        }
    }
    let world = c.tp_size * if c.attention_dp { 1 } else { c.ranks };
    let graphs: Map<String, Value> = GRAPH_PHASES.iter().map(|p| ((*p).to_owned(), json!(0.0))).collect();
    let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let extra = json!({
        "world_size": world,
        "startup_time": startup_time(false),
        "effective_max_running_requests_per_dp": c.max_running_requests,
        "last_gen_throughput": 0.0,
        "memory_usage": {
            "weight": round3(c.pool.weight_gib), "kvcache": round3(c.pool.kv_cache_gib),
            "startup_available": round3(c.pool.startup_available_gib), "token_capacity": c.pool.max_total_num_tokens,
            "token_capacity_swa": null, "graph": graphs,
        },
        "disaggregation_mode": c.mode.as_str(),
        "decode_cuda_graph_bs": [],
        "decode_cuda_graph_memory_gb": 0.0,
    });
    if let Value::Object(m) = extra {
        s.extend(m);
    }
    if c.speculative.algorithm.is_some() {
        s.insert("avg_spec_accept_length".into(), json!(c.params.mtp_acceptance));
    }
    Value::Object(s)
}

/// `GET /server_info` for 0.5.23 and later.
pub(super) fn full(app: &App) -> Value {
    let c = &app.config;
    let args = server_args(app);
    let mut info = args.clone();
    let runtime = json!({
        "launch_command": c.launch_command,
        "status": "ready",
        "max_total_num_tokens": c.pool.max_total_num_tokens,
        "max_req_input_len": c.pool.max_req_input_len,
        "startup_time": startup_time(true),
        "hicache_object_layout": {
            "enabled": false, "backend": null, "page_size": c.page_size,
            "hicache_object_layout": {"pools": []}, "reason": "Hierarchical cache is disabled",
        },
        "kv_events": super::kv_events_descriptor(app),
        "internal_states": (0..c.ranks).map(|_| internal_state(app, &args)).collect::<Vec<_>>(),
        "version": c.sglang_version,
        "frontend": "python",
    });
    if let Value::Object(m) = runtime {
        info.extend(m);
    }
    if c.ranks > 1 {
        // The DP controller publishes its schedulers' process ids, after the HiCache layout.
        let mut with_pids = Map::new();
        for (k, v) in info {
            let after = k == "hicache_object_layout";
            with_pids.insert(k, v);
            if after {
                with_pids.insert("scheduler_pids".into(), json!(vec![std::process::id(); c.ranks as usize]));
            }
        }
        return Value::Object(with_pids);
    }
    Value::Object(info)
}

/// Whether the emulated version reports the full record.
pub(super) fn reports_full_record(c: &SimConfig) -> bool {
    at_least(&c.sglang_version, [0, 5, 23])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_holds_sglangs_546_arguments() {
        let t = template();
        assert_eq!(t.len(), 546);
        assert_eq!(t["device"], "cuda");
        let c = SimConfig::from_argv(["infera-sim", "--model-path", "m", "--is-embedding"]).unwrap();
        assert_eq!(embedding(&c)["enabled"], true, "the plan follows --is-embedding");
    }

    #[test]
    fn flags_overlay_typed_like_the_record() {
        let mut a = template();
        let flag = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        overlay_flag(&mut a, &flag(&["--device", "cpu"]));
        overlay_flag(&mut a, &flag(&["--sleep-on-idle"]));
        overlay_flag(&mut a, &flag(&["--watchdog-timeout=600"]));
        overlay_flag(&mut a, &flag(&["--disaggregation-decode-retraction-backup", "cpu_tensor"]));
        overlay_flag(&mut a, &flag(&["--no-such-flag", "1"]));
        assert_eq!(a["device"], "cpu");
        assert_eq!(a["sleep_on_idle"], true);
        assert_eq!(a["watchdog_timeout"], 600);
        assert_eq!(a["disaggregation_decode_retraction_backup"], "cpu_tensor");
        assert!(!a.contains_key("no_such_flag"));
    }
}

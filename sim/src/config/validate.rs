//! From parsed flags to a validated [`SimConfig`]: sizes checked, policies mapped to what the
//! emulator models (with a warning for those it does not), the tokenizer loaded.

use std::time::Duration;

use super::{ConfigError, ServerArgs, SimArgs, SimConfig, Speculative};
use crate::disaggregation::DisaggregationMode;
use crate::faults::Faults;
use crate::kv_events::KvEventsConfig;
use crate::kv_pool::{self, HeuristicFlags, PoolInputs};
use crate::load_events::LoadEndpoint;
use crate::model_config::ModelFacts;
use crate::params::TimingParams;
use crate::ranks::RankChoice;
use crate::scheduler::QueueOrder;

impl TryFrom<SimArgs> for SimConfig {
    type Error = ConfigError;

    fn try_from(a: SimArgs) -> Result<Self, ConfigError> {
        let mut warnings: Vec<String> =
            a.rejected.iter().map(|f| format!("ignoring unknown flag {f}")).collect();
        let (server, parallel, scheduling, sim) = (a.server, a.parallel, a.scheduling, a.sim);
        if a.memory.max_total_tokens.is_some() && server.disaggregation_mode != DisaggregationMode::Decode {
            warnings.push("--max-total-tokens is enforced on a PD decode only (reported here)".into());
        }
        if !(sim.sim_speedup.is_finite() && sim.sim_speedup > 0.0) {
            return Err(ConfigError::Speedup(sim.sim_speedup));
        }
        for (flag, value) in [
            ("dp-size", parallel.dp_size),
            ("attn-dp-size", parallel.attn_dp_size.unwrap_or(1)),
            ("tp-size", parallel.tp_size),
            ("page-size", parallel.page_size),
        ] {
            if value == 0 {
                return Err(ConfigError::Size { flag, value });
            }
        }
        let params = match &sim.sim_params {
            Some(path) => TimingParams::load(path)?,
            None => TimingParams::default(),
        };
        let queue_order = match scheduling.schedule_policy.as_str() {
            "fcfs" => QueueOrder::Fcfs,
            "shortest-prefill-first" | "shortest_prefill_first" | "spf" => QueueOrder::ShortestPrefillFirst,
            "hrrn" => QueueOrder::Hrrn,
            other => {
                warnings.push(format!("--schedule-policy {other} is emulated as fcfs"));
                QueueOrder::Fcfs
            }
        };
        let mode = server.disaggregation_mode;
        let rank_choice = match (scheduling.load_balance_method.as_str(), mode) {
            ("auto", DisaggregationMode::Prefill) | ("follow_bootstrap_room", _) => {
                RankChoice::FollowBootstrapRoom
            }
            ("auto" | "round_robin", _) => RankChoice::RoundRobin,
            (other, _) => {
                warnings.push(format!("--load-balance-method {other} is emulated as round_robin"));
                RankChoice::RoundRobin
            }
        };
        let kv_events = server.kv_events_config.as_deref().map(KvEventsConfig::parse).transpose()?.flatten();
        let raw = server.load_publish_endpoint.as_deref();
        let load_events =
            LoadEndpoint::parse(raw, kv_events.as_ref(), &sim.sim_sglang_version, &mut warnings)?;
        let chunk_tokens = u32::try_from(scheduling.chunked_prefill_size).ok().filter(|&c| c > 0);
        let tokenizer = load_tokenizer(&server)?;
        let ranks = parallel.attn_dp_size.unwrap_or(parallel.dp_size);
        let attention_dp = parallel.attn_dp_size.is_some() || parallel.enable_dp_attention;
        let model = ModelFacts::of(&server.model_path, &params.model);
        let context_length = server.context_length.unwrap_or(model.context_length);
        let speculative = scheduling.speculative_algorithm.as_deref().is_some_and(adds_draft_kv);
        let inputs = PoolInputs {
            heuristic: HeuristicFlags {
                mode,
                tp_size: parallel.tp_size,
                attn_dp_size: if attention_dp { ranks } else { 1 },
                max_running_requests: scheduling.max_running_requests,
                speculative_num_draft_tokens: scheduling.speculative_num_draft_tokens,
                chunked_prefill_size: scheduling.chunked_prefill_size,
                cuda_graph_max_bs_decode: scheduling.cuda_graph_max_bs_decode,
            },
            mem_fraction_static: a.memory.mem_fraction_static,
            max_total_tokens: a.memory.max_total_tokens,
            page_size: parallel.page_size,
            speculative,
            context_length,
        };
        let (pool, pool_warnings) = kv_pool::size(&params.model, &params.device, &inputs)?;
        warnings.extend(pool_warnings);
        let kv = a.memory.budget(pool.max_total_num_tokens);
        Ok(Self {
            served_model_name: server.served_model_name.unwrap_or_else(|| server.model_path.clone()),
            host: server.host,
            port: server.port,
            tokenizer_path: server
                .tokenizer_path
                .as_ref()
                .map_or_else(|| server.model_path.clone(), |p| p.display().to_string()),
            model_path: server.model_path,
            mode,
            bootstrap_port: server.disaggregation_bootstrap_port,
            ranks,
            attention_dp,
            tp_size: parallel.tp_size,
            page_size: parallel.page_size,
            chunk_tokens: chunk_tokens.unwrap_or(u32::MAX),
            queue_order,
            schedule_policy: scheduling.schedule_policy,
            rank_choice,
            load_balance_method: scheduling.load_balance_method,
            speculative: Speculative {
                algorithm: scheduling.speculative_algorithm,
                num_steps: scheduling.speculative_num_steps,
                eagle_topk: scheduling.speculative_eagle_topk,
                num_draft_tokens: scheduling.speculative_num_draft_tokens,
            },
            cuda_graph_max_bs_decode: scheduling.cuda_graph_max_bs_decode,
            max_running_requests: pool.max_running_requests,
            max_running_requests_flag: scheduling.max_running_requests,
            context_length,
            context_length_flag: server.context_length,
            model,
            is_embedding: server.is_embedding,
            max_total_tokens_flag: a.memory.max_total_tokens,
            pool,
            kv,
            inert_flags: a.inert_tokens,
            launch_command: a.launch.join(" "),
            kv_events_config: server.kv_events_config,
            ssl: a.ssl.files(),
            kv_events,
            load_events,
            tokenizer,
            cache_report: server.enable_cache_report,
            enable_metrics: server.enable_metrics,
            seed: sim.sim_seed,
            speedup: sim.sim_speedup,
            params,
            sglang_version: sim.sim_sglang_version,
            bootstrap_timeout: Duration::from_millis(sim.sim_bootstrap_timeout_ms),
            faults: Faults {
                fail_next: sim.sim_fail_next,
                stall_after_tokens: sim.sim_stall_after_tokens,
                die_after_tokens: sim.sim_die_after_tokens,
                hang: false,
            },
            server_info_override: match &sim.sim_server_info_override {
                Some(text) => serde_json::from_str(text).map_err(ConfigError::ServerInfoOverride)?,
                None => serde_json::Map::new(),
            },
            log: sim.sim_log,
            warnings,
        })
    }
}

/// Whether a `--speculative-algorithm` keeps a draft model's KV next to the target's in the
/// pool (SGLang 0.5.23 `DefaultPoolConfigurator`: `is_eagle()` — EAGLE, EAGLE3, NEXTN, MTP — or
/// `is_standalone()`).
fn adds_draft_kv(algorithm: &str) -> bool {
    matches!(algorithm.to_ascii_uppercase().as_str(), "EAGLE" | "EAGLE3" | "NEXTN" | "MTP" | "STANDALONE")
}

/// The tokenizer of `--tokenizer-path`, else of a model path that is a directory with a
/// `tokenizer.json` (as SGLang takes the tokenizer from the model path).
fn load_tokenizer(
    server: &ServerArgs,
) -> Result<Option<std::sync::Arc<infera_tokenize::Tokenizer>>, ConfigError> {
    let as_file = |p: &std::path::Path| if p.is_dir() { p.join("tokenizer.json") } else { p.to_owned() };
    let path = match &server.tokenizer_path {
        Some(p) => as_file(p),
        None => match std::path::Path::new(&server.model_path).join("tokenizer.json") {
            p if p.is_file() => p,
            _ => return Ok(None),
        },
    };
    let template = server.chat_template.clone().map(infera_tokenize::ChatTemplateSource::File);
    // SGLang encodes with Hugging Face `tokenizers`; so does the emulated engine (the proxy's
    // fast encoder is judged against it end to end).
    let choice = infera_tokenize::EncoderChoice::Reference;
    Ok(Some(std::sync::Arc::new(infera_tokenize::Tokenizer::load_with(&path, template.as_ref(), choice)?)))
}

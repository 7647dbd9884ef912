use clap::CommandFactory;

use super::*;
use crate::load_events::{LoadEndpoint, LoadEventsError};
use crate::ranks::RankChoice;

fn config(flags: &[&str]) -> Result<SimConfig, ConfigError> {
    let mut argv = vec!["infera-sim", "--model-path", "m"];
    argv.extend_from_slice(flags);
    SimConfig::try_from(SimArgs::parse_lenient(argv).unwrap())
}

#[test]
fn verify_cli() {
    SimArgs::command().debug_assert();
}

#[test]
fn every_flag_has_an_env_var() {
    for arg in SimArgs::command().get_arguments() {
        if ["help", "version"].contains(&arg.get_id().as_str()) {
            continue;
        }
        let env = arg.get_env().unwrap_or_else(|| panic!("--{} has no env var", arg.get_id()));
        assert!(env.to_str().unwrap().starts_with("INFERA_SIM_"), "{env:?}");
    }
}

#[test]
fn ranks_follow_attn_dp_size_then_dp_size() {
    assert_eq!(config(&[]).unwrap().ranks, 1);
    assert_eq!(config(&["--dp-size", "4"]).unwrap().ranks, 4);
    let c = config(&["--dp-size", "4", "--enable-dp-attention"]).unwrap();
    assert_eq!((c.ranks, c.attention_dp), (4, true));
    let c = config(&["--tp-size", "8", "--attn-dp-size", "8"]).unwrap();
    assert_eq!((c.ranks, c.attention_dp), (8, true));
}

#[test]
fn sglang_defaults_and_policies() {
    let c = config(&[]).unwrap();
    assert_eq!((c.port, c.bootstrap_port, c.chunk_tokens), (30000, 8998, 8192));
    assert_eq!(c.served_model_name, "m");
    assert_eq!(c.rank_choice, RankChoice::RoundRobin);
    assert_eq!(c.queue_order, QueueOrder::Fcfs);
    let c =
        config(&["--disaggregation-mode", "prefill", "--schedule-policy", "shortest-prefill-first"]).unwrap();
    assert_eq!(c.rank_choice, RankChoice::FollowBootstrapRoom);
    assert_eq!(c.queue_order, QueueOrder::ShortestPrefillFirst);
    let c = config(&["--schedule-policy", "lpm", "--load-balance-method", "shortest_queue"]).unwrap();
    assert_eq!((c.queue_order, c.rank_choice), (QueueOrder::Fcfs, RankChoice::RoundRobin));
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert_eq!(config(&["--chunked-prefill-size", "-1"]).unwrap().chunk_tokens, u32::MAX);
    assert!(config(&[]).unwrap().kv_events.is_none());
    let c = config(&["--kv-events-config", r#"{"publisher":"zmq","endpoint":"tcp://*:6000"}"#]).unwrap();
    assert_eq!(c.kv_events.unwrap().endpoint, "tcp://*:6000");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn sglang_flags_pass_silently_and_others_with_a_warning() {
    let argv = ["--trust-remote-code", "--mem-fraction-static", "0.85", "--port", "1", "--bogus", "x"];
    let c = config(&argv).unwrap();
    assert_eq!(c.port, 1);
    assert_eq!(c.warnings, ["ignoring unknown flag --bogus x (SGLang 0.5.23 has no such flag)"]);
    // Each emulated version is checked against its own release's flags.
    let c = config(&["--sim-sglang-version", "0.5.18", "--enable-hierarchical-cache", "--bogus"]).unwrap();
    assert_eq!(c.warnings, ["ignoring unknown flag --bogus (SGLang 0.5.18 has no such flag)"]);
    let args = SimArgs::parse_lenient(["infera-sim", "--model-path", "m", "--trust-remote-code"]).unwrap();
    assert_eq!(args.ignored_flags(), ["--trust-remote-code"]);
}

#[test]
fn bad_values_are_config_errors() {
    assert!(matches!(config(&["--sim-speedup", "0"]), Err(ConfigError::Speedup(_))));
    assert!(matches!(config(&["--dp-size", "0"]), Err(ConfigError::Size { .. })));
    let e = config(&["--kv-events-config", r#"{"publisher": "kafka"}"#]).unwrap_err();
    assert_eq!(e.to_string(), r#"--kv-events-config: unknown publisher "kafka" (expected "zmq" or "null")"#);
    assert!(SimArgs::parse_lenient(["infera-sim"]).is_err(), "--model-path is required");
    assert!(
        SimArgs::parse_lenient(["infera-sim", "--model-path", "m", "--disaggregation-mode", "x"]).is_err()
    );
}

#[test]
fn the_seed_and_speedup_flags_have_short_aliases() {
    let c = config(&["--seed", "9", "--speedup", "50"]).unwrap();
    assert_eq!((c.seed, c.speedup), (Some(9), 50.0));
    assert!(c.warnings.is_empty(), "aliases are not unknown flags: {:?}", c.warnings);
    let c = config(&["--seed=4", "--speedup=2.5"]).unwrap();
    assert_eq!((c.seed, c.speedup), (Some(4), 2.5));
    let c = config(&["--sim-seed", "5", "--sim-speedup", "3"]).unwrap();
    assert_eq!((c.seed, c.speedup), (Some(5), 3.0));
    assert!(matches!(config(&["--speedup", "0"]), Err(ConfigError::Speedup(_))));
    // The PD timeout is model time: SGLang's 300 s is 30 s of wall clock at 10x.
    let c = config(&["--speedup", "10"]).unwrap();
    assert_eq!(c.bootstrap_wait(), Duration::from_secs(30));
    // One flag under two names is given once.
    assert!(
        SimArgs::parse_lenient(["infera-sim", "--model-path", "m", "--seed", "1", "--sim-seed", "2"])
            .is_err()
    );
}

#[test]
fn every_worker_has_a_finite_kv_pool_that_max_total_tokens_caps() {
    let unset = config(&[]).unwrap();
    // The default model and device (GLM-5.2 on an MI355X), page size 1, no speculation.
    assert_eq!(
        unset.kv,
        KvBudget { capacity: Some(unset.pool.max_total_num_tokens), reserved_decode_tokens: 512 }
    );
    assert!((1_900_000..2_200_000).contains(&unset.pool.max_total_num_tokens), "{:?}", unset.pool);
    let decode = [
        "--disaggregation-mode",
        "decode",
        "--max-total-tokens",
        "9000",
        "--num-reserved-decode-tokens",
        "8",
    ];
    let decode = config(&decode).unwrap();
    assert_eq!(decode.kv, KvBudget { capacity: Some(9000), reserved_decode_tokens: 8 });
    // SGLang warns that a 9,000-token pool cannot hold one full-context request.
    assert_eq!(decode.warnings.len(), 1, "{:?}", decode.warnings);
    assert!(decode.warnings[0].contains("fewer than --context-length"), "{:?}", decode.warnings);
    let mixed = config(&["--max-total-tokens", "9000", "--context-length", "4096"]).unwrap();
    assert_eq!(mixed.kv.capacity, Some(9000), "reported");
    assert!(mixed.warnings.iter().any(|w| w.contains("--max-total-tokens")), "{:?}", mixed.warnings);
    let huge = config(&["--disaggregation-mode", "decode", "--max-total-tokens", "99000000"]).unwrap();
    assert_eq!(huge.kv.capacity, Some(huge.pool.profiled_tokens), "never above what the memory holds");
    assert!(huge.warnings.iter().any(|w| w.contains("profiled value")), "{:?}", huge.warnings);
}

#[test]
fn the_pool_follows_the_memory_flags_and_the_model_directory() {
    let base = config(&["--disaggregation-mode", "decode"]).unwrap();
    let less = config(&["--disaggregation-mode", "decode", "--mem-fraction-static", "0.8"]).unwrap();
    assert_eq!(less.pool.mem_fraction_static, 0.8);
    assert!(less.pool.max_total_num_tokens < base.pool.max_total_num_tokens);
    assert!(matches!(config(&["--mem-fraction-static", "0.1"]), Err(ConfigError::Pool(_))));
    // EAGLE keeps the NextN layer's KV too: fewer tokens in the same memory.
    let eagle = config(&["--disaggregation-mode", "decode", "--speculative-algorithm", "EAGLE"]).unwrap();
    assert!(eagle.pool.cell_bytes > base.pool.cell_bytes);
    // A model directory's config.json sets the context length (and `max_req_input_len`).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"max_position_embeddings": 4096}"#).unwrap();
    let path = dir.path().to_str().unwrap();
    let c =
        SimConfig::try_from(SimArgs::parse_lenient(["infera-sim", "--model-path", path]).unwrap()).unwrap();
    assert_eq!((c.context_length, c.pool.max_req_input_len), (4096, 4090));
    assert_eq!(base.context_length, 1 << 20);
}

#[test]
fn the_load_socket_needs_kv_events_like_sglang() {
    let kv = r#"{"publisher":"zmq","endpoint":"tcp://*:6000"}"#;
    let load = |mode: &str| config(&["--kv-events-config", kv, "--load-publish-endpoint", mode]);
    assert!(config(&[]).unwrap().load_events.is_none());
    assert!(load("off").unwrap().load_events.is_none());
    assert!(matches!(load("auto").unwrap().load_events, Some(LoadEndpoint::Auto)));
    assert!(matches!(load("tcp://*:7000").unwrap().load_events, Some(LoadEndpoint::At(_))));
    assert!(matches!(load("ipc:///tmp/x"), Err(ConfigError::LoadEvents(_))));
    let without_kv = config(&["--load-publish-endpoint", "auto"]);
    assert!(matches!(without_kv, Err(ConfigError::LoadEvents(LoadEventsError::NoKvEvents))));
    // SGLang 0.5.18 has no such flag.
    let old = config(&["--sim-sglang-version", "0.5.18", "--load-publish-endpoint", "auto"]).unwrap();
    assert!(old.load_events.is_none());
    assert!(old.warnings.iter().any(|w| w.contains("--load-publish-endpoint")), "{:?}", old.warnings);
}

#[test]
fn a_decode_without_max_total_tokens_reports_its_pool() {
    use crate::api::info::reported_kv_capacity;
    let decode = config(&["--disaggregation-mode", "decode"]).unwrap();
    assert_eq!(reported_kv_capacity(&decode), decode.pool.max_total_num_tokens);
    assert!(reported_kv_capacity(&decode) > 0);
    let bounded = config(&["--disaggregation-mode", "decode", "--max-total-tokens", "9000"]).unwrap();
    assert_eq!(reported_kv_capacity(&bounded), 9000);
    let prefill = config(&["--disaggregation-mode", "prefill"]).unwrap();
    assert_eq!(reported_kv_capacity(&prefill), prefill.pool.max_total_num_tokens);
}

#[test]
fn is_embedding_is_modelled_and_pooling_architectures_never_generate() {
    let plain = config(&[]).unwrap();
    assert!(!plain.is_embedding && plain.generates());
    let embedding = config(&["--is-embedding"]).unwrap();
    assert!(embedding.is_embedding && !embedding.generates());
    assert!(embedding.inert_flags.is_empty(), "no longer a dropped flag");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"architectures": ["BertModel"], "hidden_size": 384}"#)
        .unwrap();
    let argv = ["infera-sim", "--model-path", dir.path().to_str().unwrap()];
    let bert = SimConfig::try_from(SimArgs::parse_lenient(argv).unwrap()).unwrap();
    assert!(!bert.is_embedding && !bert.generates(), "SGLang's is_generation_model");
    assert_eq!(bert.model.hidden_size, 384);
}

//! Deployment files that must not start: each error names the line and the field.

use std::path::Path;

use infera_launcher::{LaunchError, plan_text};

/// A valid PD deployment; tests replace parts of it.
const GOOD: &str = include_str!("fixtures/pd.toml");

fn error_of(text: &str) -> String {
    match plan_text(Path::new("deploy.toml"), text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn edited(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from:?} not in GOOD");
    GOOD.replacen(from, to, 1)
}

#[test]
fn the_base_file_is_valid() {
    let plan = plan_text(Path::new("deploy.toml"), GOOD).unwrap();
    assert_eq!(plan.workers.len(), 2);
}

#[test]
fn unknown_keys_name_their_line() {
    let e = error_of(&edited("tp = 2\n", "tp = 2\ntensor_parallel = 2\n"));
    assert!(e.starts_with("deploy.toml:19:1: unknown field `tensor_parallel`"), "{e}");
    let e = error_of(&edited("port = 30001", "port = 30001\ngpu = 3"));
    assert!(e.starts_with("deploy.toml:25:1: unknown field `gpu`"), "{e}");
    let e = error_of(&edited("engine = \"sglang\"", "engine = \"vllm\""));
    assert!(e.starts_with("deploy.toml:1:10: unknown variant `vllm`"), "{e}");
}

#[test]
fn gpus_shared_by_two_workers_on_one_node_are_rejected() {
    let e = error_of(&edited("gpus = [2, 3]", "gpus = [1, 2]"));
    assert!(
        e.contains("deploy.toml:23: decode.workers[0].gpus: GPU 1 on 127.0.0.1 is also claimed by p0 (prefill.workers[0].gpus, line 14)"),
        "{e}"
    );
    // On another node the same ids are fine.
    let other = edited("gpus = [2, 3]", "host = \"10.0.0.2\"\ngpus = [0, 1]");
    plan_text(Path::new("deploy.toml"), &other).unwrap();
}

#[test]
fn pp_layers_must_sum_to_the_model_layers() {
    let e = error_of(&edited("pp_layers = [4, 4]", "pp_layers = [4, 3]"));
    assert!(
        e.contains(
            "deploy.toml:10: prefill.pp_layers: stages sum to 7 layers but model.num_layers = 8 (line 6)"
        ),
        "{e}"
    );
    let e = error_of(&edited("pp_layers = [4, 4]", "pp_layers = [2, 2, 4]"));
    assert!(e.contains("prefill.pp_layers: lists 3 stages but pp = 2"), "{e}");
    let e = error_of(&edited("num_layers = 8\n", ""));
    assert!(e.contains("prefill.pp_layers: needs model.num_layers"), "{e}");
}

#[test]
fn a_request_weight_needs_a_demand_mode() {
    let e = error_of(&edited("decode_input_demand = \"on\"\n", ""));
    assert!(
        e.contains("deploy.toml:27: router.decode_request_weight: W = 1000 needs router.decode_input_demand = \"shadow\" or \"on\" (got \"off\")"),
        "{e}"
    );
    let e = error_of(&edited("\"on\"", "\"off\""));
    assert!(e.contains("router.decode_request_weight"), "{e}");
    let e = error_of(&edited("\"on\"", "\"maybe\""));
    assert!(
        e.contains("deploy.toml:27: router.decode_input_demand: \"maybe\" is not one of off, shadow, on"),
        "{e}"
    );
}

#[test]
fn gpu_counts_follow_the_parallelism() {
    let e = error_of(&edited("gpus = [2, 3]", "gpus = [2, 3, 4]"));
    assert!(e.contains("decode.workers[0].gpus: lists 3 GPUs but tp × pp × dp = 2 × 1 × 1 = 2"), "{e}");
    let e = error_of(&edited("attn_dp = 2", "attn_dp = 3"));
    assert!(e.contains("decode.attn_dp: 3 attention-DP ranks do not divide tp = 2"), "{e}");
}

#[test]
fn old_versions_reject_what_they_cannot_spell() {
    let e =
        error_of(&edited("tp = 2\nattn_dp = 2", "tp = 2\nattn_dp = 2\ndp = 2").replace("0.5.23", "0.5.21"));
    assert!(e.contains("decode.dp: SGLang 0.5.21 cannot combine DP replicas with attention DP"), "{e}");
    let e = error_of(
        &edited("pp = 2\n", "pp = 2\nschedule_policy = \"shortest-prefill-first\"\n")
            .replace("0.5.23", "0.5.18"),
    );
    assert!(
        e.contains("prefill.schedule_policy: shortest-prefill-first needs SGLang 0.5.21 or later"),
        "{e}"
    );
    let e = error_of(&GOOD.replace("0.5.23", "0.5.9"));
    assert!(e.contains("deploy.toml:2: sglang_version: SGLang 0.5.9 is not supported"), "{e}");
}

#[test]
fn ports_shared_on_one_node_are_rejected() {
    let e = error_of(&edited("port = 30001", "port = 30000"));
    assert!(e.contains("decode.workers[0].port: port 30000 on 127.0.0.1 is also claimed by p0"), "{e}");
    // The decode's 2 ranks publish on 5600–5601 and replay on 5602–5603.
    let e = error_of(
        &edited("port = 30000", "port = 30000\nkv_events_port = 5602")
            .replace("port = 30001", "port = 30001\nkv_events_port = 5600"),
    );
    assert!(
        e.contains("decode.workers[0].kv_events_port: ports 5600–5603 on 127.0.0.1 is also claimed by p0"),
        "{e}"
    );
    // With load_events the decode also claims the load ports 5604–5605, after its replay ports.
    let e = error_of(
        &edited("port = 30000", "port = 30000\nkv_events_port = 5605")
            .replace("port = 30001", "port = 30001\nkv_events_port = 5600\nload_events = true"),
    );
    assert!(
        e.contains("decode.workers[0].kv_events_port: ports 5600–5605 on 127.0.0.1 is also claimed by p0"),
        "{e}"
    );
}

#[test]
fn the_load_socket_needs_kv_events() {
    let e = error_of(&edited("port = 30001", "port = 30001\nload_events = true"));
    assert!(e.contains("decode.workers[0].load_events: needs kv_events_port"), "{e}");
}

#[test]
fn speculation_differs_between_prefill_and_decode() {
    let spec = "[decode.speculative]\nalgorithm = \"EAGLE\"\nnum_steps = 5\neagle_topk = 1\nnum_draft_tokens = 6\n\n";
    let text = edited("[[decode.workers]]", &format!("{spec}[[decode.workers]]")).replacen(
        "[[prefill.workers]]",
        "[prefill.speculative]\nalgorithm = \"EAGLE\"\nnum_steps = 3\neagle_topk = 1\nnum_draft_tokens = 4\n\n[[prefill.workers]]",
        1,
    );
    let e = error_of(&text);
    assert!(e.contains("prefill.speculative: differs from decode.speculative"), "{e}");
    let e = error_of(
        &edited("[[decode.workers]]", &format!("{spec}[[decode.workers]]"))
            .replace("num_draft_tokens = 6", "num_draft_tokens = 4"),
    );
    assert!(e.contains("decode.speculative.num_draft_tokens: with eagle_topk = 1, num_draft_tokens must be num_steps + 1 = 6"), "{e}");
}

#[test]
fn typed_flags_and_launcher_variables_cannot_be_smuggled_in() {
    let e =
        error_of(&edited("attn_dp = 2\n", "attn_dp = 2\nextra_args = [\"--cuda-graph-max-bs\", \"8\"]\n"));
    assert!(e.contains("decode.extra_args: --cuda-graph-max-bs is set by a typed key"), "{e}");
    let e = error_of(&edited("attn_dp = 2\n", "attn_dp = 2\nenv = { CUDA_VISIBLE_DEVICES = \"0\" }\n"));
    assert!(e.contains("decode.env.CUDA_VISIBLE_DEVICES: is set by the launcher"), "{e}");
}

#[test]
fn shapes_need_both_pd_roles() {
    let text = GOOD.split("[decode]").next().unwrap();
    let e = error_of(text);
    assert!(e.contains("decode: a PD deployment needs [decode] workers besides [prefill]"), "{e}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let e = error_of(
        &edited("pp_layers = [4, 4]", "pp_layers = [4, 3]").replace("gpus = [2, 3]", "gpus = [1, 2]"),
    );
    assert!(matches!(plan_text(Path::new("x"), "engine = 1"), Err(LaunchError::Load(_))));
    assert_eq!(e.lines().count(), 3, "{e}");
}

#[test]
fn router_settings_outside_their_flags_ranges_name_their_key() {
    let router = |extra: &str| {
        error_of(&edited("decode_request_weight = 1000\n", &format!("decode_request_weight = 1000\n{extra}")))
    };
    let e = router("prefill_overlap_credit = 100.5\n");
    let want = "deploy.toml:29: router.prefill_overlap_credit: the prefill overlap credit must be a finite number from 0 to 100, got 100.5";
    assert!(e.contains(want), "{e}");
    let e = router("prefill_overlap_credit = nan\n");
    assert!(e.contains("router.prefill_overlap_credit: the prefill overlap credit must be a finite number from 0 to 100, got NaN"), "{e}");
    let e = router("prefill_policy = \"cache_aware\"\n");
    assert!(
        e.contains("router.prefill_policy: \"cache_aware\" is not one of cache-aware, round-robin"),
        "{e}"
    );
    let e = router("lease_ttl_ms = 200\n");
    assert!(e.contains("router.lease_ttl_ms: 200 is outside 300 – 300000"), "{e}");
    let e = router("kv_index_max_blocks = 0\n");
    assert!(e.contains("router.kv_index_max_blocks: 0 is outside 1 – 1000000000"), "{e}");
    let e = router("session_ttl_ms = 86400001\n");
    assert!(e.contains("router.session_ttl_ms: 86400001 is outside 0 – 86400000"), "{e}");
    let e = router("chat_template = \"/m/chat.jinja\"\n");
    assert!(e.contains("deploy.toml:29: router.chat_template: needs router.tokenizer"), "{e}");
    // In range, and the template with its tokenizer: accepted.
    let fine = edited(
        "decode_request_weight = 1000\n",
        "decode_request_weight = 1000\nprefill_overlap_credit = 100\nprefill_policy = \"round-robin\"\n\
         lease_ttl_ms = 300\ntokenizer = \"/m/tokenizer.json\"\nchat_template = \"/m/chat.jinja\"\n",
    );
    plan_text(Path::new("deploy.toml"), &fine).unwrap();
}

#[test]
fn auto_w_and_the_admin_address_are_checked_as_control_would() {
    let w = |to: &str| edited("decode_request_weight = 1000\n", to);
    // `auto` is the one word; its fallback is a W, its fit's half-life in control's range.
    plan_text(Path::new("deploy.toml"), &w("decode_request_weight = \"auto\"\n")).unwrap();
    plan_text(Path::new("deploy.toml"), &w("decode_request_weight = \"AUTO\"\n")).unwrap();
    let e = error_of(&w("decode_request_weight = \"automatic\"\n"));
    assert!(e.contains("deploy.toml:28"), "{e}");
    assert!(e.contains("invalid value: string \"automatic\", expected a number or \"auto\""), "{e}");
    let e = error_of(&w("decode_request_weight = \"auto\"\ndecode_request_weight_fallback = -1\n"));
    assert!(e.contains("deploy.toml:29: router.decode_request_weight_fallback:"), "{e}");
    let e = error_of(&w("decode_request_weight = \"auto\"\ndecode_weight_fit_half_life_ms = 10\n"));
    assert!(e.contains("router.decode_weight_fit_half_life_ms: 10 is outside 100 – 3600000"), "{e}");
    // auto scores with its fallback W until a fit is trusted: that needs a demand mode too.
    let off = w("decode_request_weight = \"auto\"\n").replace("decode_input_demand = \"on\"\n", "");
    let e = error_of(&off);
    assert!(e.contains("router.decode_request_weight: W = auto (W = 1000000 until a fit is trusted"), "{e}");
    assert!(e.contains("needs router.decode_input_demand = \"shadow\" or \"on\" (got \"off\")"), "{e}");
    // ... unless that fallback is 0 (token-only demand until the fit).
    let zero = off.replace("\"auto\"\n", "\"auto\"\ndecode_request_weight_fallback = 0\n");
    plan_text(Path::new("deploy.toml"), &zero).unwrap();

    let admin = |extra: &str| w(&format!("decode_request_weight = 1000\n{extra}"));
    plan_text(Path::new("deploy.toml"), &admin("admin_listen = \"127.0.0.1:50052\"\n")).unwrap();
    let e = error_of(&admin("admin_listen = \"127.0.0.1:50051\"\n"));
    assert!(
        e.contains("deploy.toml:29: router.admin_listen: 127.0.0.1:50051 is the address of control's listen 127.0.0.1:50051"),
        "{e}"
    );
    let e = error_of(&admin("listen = \"0.0.0.0:7000\"\nadmin_listen = \"10.0.0.1:7000\"\n"));
    assert!(
        e.contains("router.admin_listen: 10.0.0.1:7000 is the address of control's listen 0.0.0.0:7000"),
        "{e}"
    );
    let e = error_of(&admin("admin_listen = \"control:50052\"\n"));
    assert!(e.contains("router.admin_listen: \"control:50052\" is not an address (IP:PORT)"), "{e}");
    // Port 0 picks a free port each time: never the same socket.
    plan_text(Path::new("deploy.toml"), &admin("listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n"))
        .unwrap();
}

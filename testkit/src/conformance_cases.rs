//! The requests the sim was held to SGLang 0.5.23 with, and what may differ. A conformance test
//! sends each [`Case`] to a real SGLang worker and to an `infera-sim` started with the same
//! flags, turns both answers into [`Answer::shape`]s and [`compare`](crate::shape::compare)s
//! them under [`spec`] ([`RANGES`] + [`INTENDED`]).
//!
//! The workers, all with `--model-path <tiny model> --served-model-name tiny` and, for real
//! SGLang on CPU, `--device cpu --attention-backend torch_native --sampling-backend pytorch
//! --disable-overlap-schedule --sleep-on-idle --max-total-tokens 20000` (see [`Worker`]). Cases
//! of [`Worker::Pd`] send the same body to the prefill and the decode (the prefill first), each
//! with `bootstrap_host`, `bootstrap_port` (the prefill's bootstrap port) and one
//! `bootstrap_room`, as a router does ([`Case::pd_body`]).

mod intended;
mod send;

use serde_json::{Value, json};

pub use intended::{CASE_INTENDED, INTENDED, RANGES, STREAM_INTENDED, spec, spec_for};
pub use send::{Answer, send, send_pd};

/// The model the cases name (`--served-model-name`).
pub const MODEL: &str = "tiny";

/// Where a case is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Worker {
    /// An aggregated worker (`--disaggregation-mode null`).
    Aggregated,
    /// A PD prefill (`--disaggregation-mode prefill --disaggregation-bootstrap-port P`).
    Prefill,
    /// A PD decode (`--disaggregation-mode decode`; real SGLang on CPU also needs
    /// `--disaggregation-decode-retraction-backup cpu_tensor`).
    Decode,
    /// A prefill + decode pair, both legs driven by the test.
    Pd,
    /// An aggregated worker with `--dp-size 2` (real SGLang on CPU needs
    /// `SGLANG_CPU_OMP_THREADS_BIND`).
    Dp2,
}

/// The info routes every worker kind answers.
const ALL: &[Worker] = &[Worker::Aggregated, Worker::Prefill, Worker::Decode, Worker::Dp2];
/// An aggregated worker only.
const AGG: &[Worker] = &[Worker::Aggregated];
/// Aggregated workers, one or two ranks.
const AGG_DP: &[Worker] = &[Worker::Aggregated, Worker::Dp2];
/// A PD role alone, without bootstrap fields.
const PD_ROLES: &[Worker] = &[Worker::Prefill, Worker::Decode];

/// A request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// A unique name (fixture files, reports).
    pub name: &'static str,
    /// The HTTP method.
    pub method: &'static str,
    /// Path and query.
    pub path: &'static str,
    /// The body as sent: JSON text (or deliberately broken text); `$LONG` stands for a
    /// 6,000-word prompt ([`long_prompt`]).
    pub body: Option<&'static str>,
    /// The worker kinds it goes to.
    pub workers: &'static [Worker],
}

impl Case {
    /// The body's bytes, `$LONG` expanded.
    pub fn body_text(&self) -> Option<String> {
        self.body.map(|b| b.replace("$LONG", &long_prompt()))
    }

    /// The body as JSON, if it is JSON.
    pub fn json_body(&self) -> Option<Value> {
        self.body_text().and_then(|b| serde_json::from_str(&b).ok())
    }

    /// The body a PD leg gets: this one with `bootstrap_host`, `bootstrap_port` and
    /// `bootstrap_room` (chosen by the caller: a random integer below 2⁶³).
    pub fn pd_body(&self, bootstrap_host: &str, bootstrap_port: u16, room: u64) -> Option<Value> {
        let mut body = self.json_body()?;
        let fields = json!({"bootstrap_host": bootstrap_host, "bootstrap_port": bootstrap_port, "bootstrap_room": room});
        if let (Value::Object(b), Value::Object(f)) = (&mut body, fields) {
            b.extend(f);
        }
        Some(body)
    }

    /// Whether the answer is a stream.
    pub fn streams(&self) -> bool {
        self.json_body().and_then(|b| b.get("stream").and_then(Value::as_bool)).unwrap_or(false)
    }
}

/// A prompt longer than the tiny model's 4,096-token context: 6,000 × `"hello "`.
pub fn long_prompt() -> String {
    "hello ".repeat(6000)
}

/// Every case, in the order they were run.
pub const CASES: &[Case] = &[
    // Info routes.
    Case { name: "server_info", method: "GET", path: "/server_info", body: None, workers: ALL },
    Case { name: "get_server_info", method: "GET", path: "/get_server_info", body: None, workers: ALL },
    Case { name: "model_info", method: "GET", path: "/model_info", body: None, workers: ALL },
    Case { name: "get_model_info", method: "GET", path: "/get_model_info", body: None, workers: ALL },
    Case { name: "models", method: "GET", path: "/v1/models", body: None, workers: ALL },
    Case { name: "model_by_id", method: "GET", path: "/v1/models/tiny", body: None, workers: ALL },
    Case { name: "health", method: "GET", path: "/health", body: None, workers: ALL },
    Case { name: "health_generate", method: "GET", path: "/health_generate", body: None, workers: ALL },
    Case { name: "loads", method: "GET", path: "/v1/loads", body: None, workers: ALL },
    Case { name: "loads_all", method: "GET", path: "/v1/loads?include=all", body: None, workers: ALL },
    Case { name: "loads_core", method: "GET", path: "/v1/loads?include=core", body: None, workers: ALL },
    Case { name: "loads_memory", method: "GET", path: "/v1/loads?include=memory", body: None, workers: ALL },
    Case { name: "loads_spec", method: "GET", path: "/v1/loads?include=spec", body: None, workers: ALL },
    Case { name: "loads_lora", method: "GET", path: "/v1/loads?include=lora", body: None, workers: ALL },
    Case { name: "loads_disagg", method: "GET", path: "/v1/loads?include=disagg", body: None, workers: ALL },
    Case { name: "loads_queues", method: "GET", path: "/v1/loads?include=queues", body: None, workers: ALL },
    Case {
        name: "loads_two",
        method: "GET",
        path: "/v1/loads?include=core,memory",
        body: None,
        workers: ALL,
    },
    Case { name: "loads_rank0", method: "GET", path: "/v1/loads?dp_rank=0", body: None, workers: ALL },
    Case {
        name: "loads_rank1",
        method: "GET",
        path: "/v1/loads?dp_rank=1",
        body: None,
        workers: &[Worker::Dp2],
    },
    Case { name: "loads_rank7", method: "GET", path: "/v1/loads?dp_rank=7", body: None, workers: ALL },
    Case { name: "loads_rank_nan", method: "GET", path: "/v1/loads?dp_rank=x", body: None, workers: ALL },
    Case {
        name: "loads_bad_include",
        method: "GET",
        path: "/v1/loads?include=bogus",
        body: None,
        workers: ALL,
    },
    Case {
        name: "loads_prometheus",
        method: "GET",
        path: "/v1/loads?format=prometheus",
        body: None,
        workers: ALL,
    },
    Case { name: "get_load", method: "GET", path: "/get_load", body: None, workers: AGG },
    Case { name: "flush_cache_get", method: "GET", path: "/flush_cache", body: None, workers: AGG },
    Case { name: "flush_cache_post", method: "POST", path: "/flush_cache", body: None, workers: AGG },
    // /generate.
    Case { name: "generate", method: "POST", path: "/generate", body: Some(GEN), workers: AGG_DP },
    Case { name: "generate_stream", method: "POST", path: "/generate", body: Some(GEN_STREAM), workers: AGG },
    Case {
        name: "generate_ids",
        method: "POST",
        path: "/generate",
        body: Some(r#"{"input_ids":[1,2,3,4,5],"sampling_params":{"max_new_tokens":4,"temperature":0}}"#),
        workers: AGG,
    },
    Case {
        name: "generate_logprobs",
        method: "POST",
        path: "/generate",
        body: Some(GEN_LOGPROBS),
        workers: AGG,
    },
    Case {
        name: "generate_logprobs_stream",
        method: "POST",
        path: "/generate",
        body: Some(GEN_LOGPROBS_STREAM),
        workers: AGG,
    },
    Case { name: "generate_stop", method: "POST", path: "/generate", body: Some(GEN_STOP), workers: AGG },
    Case { name: "generate_n2", method: "POST", path: "/generate", body: Some(GEN_N2), workers: AGG },
    Case { name: "generate_rid", method: "POST", path: "/generate", body: Some(GEN_RID), workers: AGG },
    Case { name: "generate_zero", method: "POST", path: "/generate", body: Some(GEN_ZERO), workers: AGG },
    Case {
        name: "generate_rank1",
        method: "POST",
        path: "/generate",
        body: Some(GEN_RANK1),
        workers: &[Worker::Dp2],
    },
    Case {
        name: "generate_dp_rank1",
        method: "POST",
        path: "/generate",
        body: Some(GEN_DPR1),
        workers: &[Worker::Dp2],
    },
    // /v1/completions.
    Case { name: "completions", method: "POST", path: "/v1/completions", body: Some(COMP), workers: AGG },
    Case {
        name: "completions_stream",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_STREAM),
        workers: AGG,
    },
    Case {
        name: "completions_usage",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_USAGE),
        workers: AGG,
    },
    Case {
        name: "completions_logprobs",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_LP),
        workers: AGG,
    },
    Case {
        name: "completions_logprobs_stream",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_LP_STREAM),
        workers: AGG,
    },
    Case {
        name: "completions_n2",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_N2),
        workers: AGG,
    },
    Case {
        name: "completions_stop",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_STOP),
        workers: AGG,
    },
    Case {
        name: "completions_ids",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_IDS),
        workers: AGG,
    },
    Case {
        name: "completions_echo",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_ECHO),
        workers: AGG,
    },
    // /v1/chat/completions.
    Case { name: "chat", method: "POST", path: "/v1/chat/completions", body: Some(CHAT), workers: AGG },
    Case {
        name: "chat_stream",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_STREAM),
        workers: AGG,
    },
    Case {
        name: "chat_usage",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_USAGE),
        workers: AGG,
    },
    Case {
        name: "chat_logprobs",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_LP),
        workers: AGG,
    },
    Case {
        name: "chat_logprobs_stream",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_LP_STREAM),
        workers: AGG,
    },
    Case { name: "chat_n2", method: "POST", path: "/v1/chat/completions", body: Some(CHAT_N2), workers: AGG },
    Case {
        name: "chat_stop",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_STOP),
        workers: AGG,
    },
    Case {
        name: "chat_json_schema",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_SCHEMA),
        workers: AGG,
    },
    Case {
        name: "chat_tools",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_TOOLS),
        workers: AGG,
    },
    Case {
        name: "chat_tools_stream",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_TOOLS_STREAM),
        workers: AGG,
    },
    Case {
        name: "chat_mct",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_MCT),
        workers: AGG,
    },
    Case {
        name: "chat_rank1",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_RANK1),
        workers: &[Worker::Dp2],
    },
    // /v1/responses.
    Case { name: "responses", method: "POST", path: "/v1/responses", body: Some(RESP), workers: AGG },
    Case {
        name: "responses_stream",
        method: "POST",
        path: "/v1/responses",
        body: Some(RESP_STREAM),
        workers: AGG,
    },
    // Errors.
    Case { name: "generate_bad_json", method: "POST", path: "/generate", body: Some(BAD_JSON), workers: AGG },
    Case {
        name: "completions_bad_json",
        method: "POST",
        path: "/v1/completions",
        body: Some(BAD_JSON),
        workers: AGG,
    },
    Case {
        name: "chat_bad_json",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(BAD_JSON),
        workers: AGG,
    },
    Case {
        name: "responses_bad_json",
        method: "POST",
        path: "/v1/responses",
        body: Some(BAD_JSON),
        workers: AGG,
    },
    Case { name: "generate_empty", method: "POST", path: "/generate", body: Some("{}"), workers: AGG },
    Case {
        name: "completions_no_prompt",
        method: "POST",
        path: "/v1/completions",
        body: Some(ONLY_MODEL),
        workers: AGG,
    },
    Case {
        name: "chat_no_messages",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(ONLY_MODEL),
        workers: AGG,
    },
    Case {
        name: "responses_no_input",
        method: "POST",
        path: "/v1/responses",
        body: Some(ONLY_MODEL),
        workers: AGG,
    },
    Case { name: "generate_too_long", method: "POST", path: "/generate", body: Some(GEN_LONG), workers: AGG },
    Case {
        name: "completions_too_long",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_LONG),
        workers: AGG,
    },
    Case {
        name: "completions_too_long_stream",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_LONG_STREAM),
        workers: AGG,
    },
    Case {
        name: "chat_too_long",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_LONG),
        workers: AGG,
    },
    Case {
        name: "chat_too_many_tokens",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_HUGE),
        workers: AGG,
    },
    Case {
        name: "generate_bad_temperature",
        method: "POST",
        path: "/generate",
        body: Some(GEN_BAD_T),
        workers: AGG,
    },
    Case {
        name: "generate_bad_top_p",
        method: "POST",
        path: "/generate",
        body: Some(GEN_BAD_P),
        workers: AGG,
    },
    Case {
        name: "generate_bad_max",
        method: "POST",
        path: "/generate",
        body: Some(GEN_BAD_MAX),
        workers: AGG,
    },
    Case {
        name: "completions_bad_temperature",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP_BAD_T),
        workers: AGG,
    },
    Case {
        name: "chat_bad_temperature",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_BAD_T),
        workers: AGG,
    },
    Case {
        name: "chat_bad_top_p",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_BAD_P),
        workers: AGG,
    },
    Case {
        name: "chat_bad_max",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_BAD_MAX),
        workers: AGG,
    },
    Case {
        name: "chat_bad_temperature_stream",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_BAD_T_STREAM),
        workers: AGG,
    },
    Case {
        name: "generate_bad_rank",
        method: "POST",
        path: "/generate",
        body: Some(GEN_RANK5),
        workers: AGG_DP,
    },
    Case {
        name: "chat_bad_rank",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_RANK5),
        workers: AGG_DP,
    },
    Case { name: "generate_get", method: "GET", path: "/generate", body: None, workers: AGG },
    Case { name: "chat_get", method: "GET", path: "/v1/chat/completions", body: None, workers: AGG },
    Case { name: "server_info_post", method: "POST", path: "/server_info", body: Some("{}"), workers: AGG },
    Case { name: "loads_post", method: "POST", path: "/v1/loads", body: Some("{}"), workers: AGG },
    Case { name: "not_found_get", method: "GET", path: "/nope", body: None, workers: AGG },
    Case { name: "not_found_post", method: "POST", path: "/nope", body: Some("{}"), workers: AGG },
    Case { name: "health_delete", method: "DELETE", path: "/health", body: None, workers: AGG },
    Case {
        name: "abort_unknown",
        method: "POST",
        path: "/abort_request",
        body: Some(r#"{"rid":"nonexistent"}"#),
        workers: AGG,
    },
    // PD: both legs, and each role without bootstrap fields.
    Case { name: "pd_generate", method: "POST", path: "/generate", body: Some(GEN), workers: &[Worker::Pd] },
    Case {
        name: "pd_generate_stream",
        method: "POST",
        path: "/generate",
        body: Some(GEN_STREAM),
        workers: &[Worker::Pd],
    },
    Case {
        name: "pd_chat_usage",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT_USAGE),
        workers: &[Worker::Pd],
    },
    Case {
        name: "pd_chat",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT),
        workers: &[Worker::Pd],
    },
    Case {
        name: "pd_completions",
        method: "POST",
        path: "/v1/completions",
        body: Some(COMP),
        workers: &[Worker::Pd],
    },
    Case {
        name: "pd_generate_logprobs",
        method: "POST",
        path: "/generate",
        body: Some(GEN_LOGPROBS),
        workers: &[Worker::Pd],
    },
    Case { name: "pd_no_bootstrap", method: "POST", path: "/generate", body: Some(GEN), workers: PD_ROLES },
    Case {
        name: "pd_chat_no_bootstrap",
        method: "POST",
        path: "/v1/chat/completions",
        body: Some(CHAT),
        workers: PD_ROLES,
    },
];

const GEN: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0}}"#;
const GEN_STREAM: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"stream":true}"#;
const GEN_LOGPROBS: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"return_logprob":true,"top_logprobs_num":2}"#;
const GEN_LOGPROBS_STREAM: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"return_logprob":true,"top_logprobs_num":2,"stream":true}"#;
const GEN_STOP: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":32,"temperature":0,"stop":["e"]}}"#;
const GEN_N2: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0,"n":2}}"#;
const GEN_RID: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"rid":"my-rid-1"}"#;
const GEN_ZERO: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":0,"temperature":0}}"#;
const GEN_RANK1: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"routed_dp_rank":1}"#;
const GEN_DPR1: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"data_parallel_rank":1}"#;
const GEN_RANK5: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"routed_dp_rank":5}"#;
const GEN_LONG: &str = r#"{"text":"$LONG","sampling_params":{"max_new_tokens":4}}"#;
const GEN_BAD_T: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":-1}}"#;
const GEN_BAD_P: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0,"top_p":2}}"#;
const GEN_BAD_MAX: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":-1,"temperature":0}}"#;
const COMP: &str = r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0}"#;
const COMP_STREAM: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"stream":true}"#;
const COMP_USAGE: &str = r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
const COMP_LP: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"logprobs":2}"#;
const COMP_LP_STREAM: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"logprobs":2,"stream":true}"#;
const COMP_N2: &str = r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"n":2}"#;
const COMP_STOP: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":32,"temperature":0,"stop":["e"]}"#;
const COMP_IDS: &str = r#"{"model":"tiny","prompt":[1,2,3],"max_tokens":8,"temperature":0}"#;
const COMP_ECHO: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"echo":true}"#;
const COMP_LONG: &str = r#"{"model":"tiny","prompt":"$LONG","max_tokens":8,"temperature":0}"#;
const COMP_LONG_STREAM: &str =
    r#"{"model":"tiny","prompt":"$LONG","max_tokens":8,"temperature":0,"stream":true}"#;
const COMP_BAD_T: &str = r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":-1}"#;
const CHAT: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0}"#;
const CHAT_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"stream":true}"#;
const CHAT_USAGE: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
const CHAT_LP: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":2}"#;
const CHAT_LP_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":2,"stream":true}"#;
const CHAT_N2: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"n":2}"#;
const CHAT_STOP: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":32,"temperature":0,"stop":["e"]}"#;
const CHAT_SCHEMA: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}}"#;
const CHAT_TOOLS: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"tools":[{"type":"function","function":{"name":"get_weather","description":"w","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}"#;
const CHAT_TOOLS_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"stream":true,"tools":[{"type":"function","function":{"name":"get_weather","description":"w","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}"#;
const CHAT_MCT: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"max_completion_tokens":4}"#;
const CHAT_RANK1: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"routed_dp_rank":1}"#;
const CHAT_RANK5: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"routed_dp_rank":5}"#;
const CHAT_LONG: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"$LONG"}],"max_tokens":8,"temperature":0}"#;
const CHAT_HUGE: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":100000,"temperature":0}"#;
const CHAT_BAD_T: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":-1}"#;
const CHAT_BAD_P: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"top_p":2}"#;
const CHAT_BAD_MAX: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":-1,"temperature":0}"#;
const CHAT_BAD_T_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":-1,"stream":true}"#;
const RESP: &str = r#"{"model":"tiny","input":"Hi there","max_output_tokens":8,"temperature":0}"#;
const RESP_STREAM: &str =
    r#"{"model":"tiny","input":"Hi there","max_output_tokens":8,"temperature":0,"stream":true}"#;
const BAD_JSON: &str = "{bad json";
const ONLY_MODEL: &str = r#"{"model":"tiny"}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_bodies_parse_where_they_should() {
        let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len(), "duplicate case names");
        for c in CASES {
            assert!(!c.workers.is_empty(), "{}", c.name);
            if let Some(body) = c.body
                && body != BAD_JSON
            {
                assert!(c.json_body().is_some(), "{}: {body}", c.name);
            }
        }
        let long = CASES.iter().find(|c| c.name == "generate_too_long").unwrap();
        assert!(long.json_body().unwrap()["text"].as_str().unwrap().len() > 30_000);
    }

    #[test]
    fn pd_bodies_carry_the_bootstrap_fields() {
        let c = CASES.iter().find(|c| c.name == "pd_generate").unwrap();
        let body = c.pd_body("127.0.0.1", 8998, 42).unwrap();
        assert_eq!(body["bootstrap_room"], 42);
        assert_eq!(body["bootstrap_port"], 8998);
        assert_eq!(body["sampling_params"]["max_new_tokens"], 8);
        assert!(CASES.iter().find(|c| c.name == "pd_generate_stream").unwrap().streams());
    }
}

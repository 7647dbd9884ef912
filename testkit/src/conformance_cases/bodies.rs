//! The request bodies of [`CASES`](super::CASES), as sent (`$LONG`: a prompt longer than the
//! context).

pub(super) const GEN: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0}}"#;
pub(super) const GEN_STREAM: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"stream":true}"#;
pub(super) const GEN_LOGPROBS: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"return_logprob":true,"top_logprobs_num":2}"#;
pub(super) const GEN_LOGPROBS_STREAM: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"return_logprob":true,"top_logprobs_num":2,"stream":true}"#;
pub(super) const GEN_STOP: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":32,"temperature":0,"stop":["e"]}}"#;
pub(super) const GEN_N2: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0,"n":2}}"#;
pub(super) const GEN_RID: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"rid":"my-rid-1"}"#;
pub(super) const GEN_ZERO: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":0,"temperature":0}}"#;
pub(super) const GEN_RANK1: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"routed_dp_rank":1}"#;
pub(super) const GEN_DPR1: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"data_parallel_rank":1}"#;
pub(super) const GEN_RANK5: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0},"routed_dp_rank":5}"#;
pub(super) const GEN_LONG: &str = r#"{"text":"$LONG","sampling_params":{"max_new_tokens":4}}"#;
pub(super) const GEN_BAD_T: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":-1}}"#;
pub(super) const GEN_BAD_P: &str = r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":8,"temperature":0,"top_p":2}}"#;
pub(super) const GEN_BAD_MAX: &str =
    r#"{"text":"Hello world, this is a test","sampling_params":{"max_new_tokens":-1,"temperature":0}}"#;
pub(super) const COMP: &str = r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0}"#;
pub(super) const COMP_STREAM: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"stream":true}"#;
pub(super) const COMP_USAGE: &str = r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
pub(super) const COMP_LP: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"logprobs":2}"#;
pub(super) const COMP_LP_STREAM: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"logprobs":2,"stream":true}"#;
pub(super) const COMP_N2: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"n":2}"#;
pub(super) const COMP_STOP: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":32,"temperature":0,"stop":["e"]}"#;
pub(super) const COMP_IDS: &str = r#"{"model":"tiny","prompt":[1,2,3],"max_tokens":8,"temperature":0}"#;
pub(super) const COMP_ECHO: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":0,"echo":true}"#;
pub(super) const COMP_LONG: &str = r#"{"model":"tiny","prompt":"$LONG","max_tokens":8,"temperature":0}"#;
pub(super) const COMP_LONG_STREAM: &str =
    r#"{"model":"tiny","prompt":"$LONG","max_tokens":8,"temperature":0,"stream":true}"#;
pub(super) const COMP_BAD_T: &str =
    r#"{"model":"tiny","prompt":"Hello world","max_tokens":8,"temperature":-1}"#;
pub(super) const CHAT: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0}"#;
pub(super) const CHAT_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"stream":true}"#;
pub(super) const CHAT_USAGE: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
pub(super) const CHAT_LP: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":2}"#;
pub(super) const CHAT_LP_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":2,"stream":true}"#;
pub(super) const CHAT_N2: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"n":2}"#;
pub(super) const CHAT_STOP: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":32,"temperature":0,"stop":["e"]}"#;
pub(super) const CHAT_SCHEMA: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}}"#;
pub(super) const CHAT_TOOLS: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"tools":[{"type":"function","function":{"name":"get_weather","description":"w","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}"#;
pub(super) const CHAT_TOOLS_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"stream":true,"tools":[{"type":"function","function":{"name":"get_weather","description":"w","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}"#;
pub(super) const CHAT_MCT: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"max_completion_tokens":4}"#;
pub(super) const CHAT_RANK1: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"routed_dp_rank":1}"#;
pub(super) const CHAT_RANK5: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"routed_dp_rank":5}"#;
pub(super) const CHAT_LONG: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"$LONG"}],"max_tokens":8,"temperature":0}"#;
pub(super) const CHAT_HUGE: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":100000,"temperature":0}"#;
pub(super) const CHAT_BAD_T: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":-1}"#;
pub(super) const CHAT_BAD_P: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":0,"top_p":2}"#;
pub(super) const CHAT_BAD_MAX: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":-1,"temperature":0}"#;
pub(super) const CHAT_BAD_T_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":8,"temperature":-1,"stream":true}"#;
pub(super) const RESP: &str = r#"{"model":"tiny","input":"Hi there","max_output_tokens":8,"temperature":0}"#;
pub(super) const RESP_STREAM: &str =
    r#"{"model":"tiny","input":"Hi there","max_output_tokens":8,"temperature":0,"stream":true}"#;
pub(super) const MSG: &str = r#"{"model":"tiny","max_tokens":8,"temperature":0,"system":"Be brief.","messages":[{"role":"user","content":"Hi there"}]}"#;
pub(super) const MSG_STREAM: &str = r#"{"model":"tiny","max_tokens":8,"temperature":0,"system":"Be brief.","messages":[{"role":"user","content":"Hi there"}],"stream":true}"#;
pub(super) const MSG_NO_MAX: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Hi there"}]}"#;
pub(super) const MSG_COUNT: &str =
    r#"{"model":"tiny","system":"Be brief.","messages":[{"role":"user","content":"Hi there"}]}"#;
pub(super) const BAD_JSON: &str = "{bad json";
pub(super) const ONLY_MODEL: &str = r#"{"model":"tiny"}"#;

//! Request bodies of the five generation routes → one [`GenRequest`]. Prompts become tokens
//! by [`prompt::of_route`] (the emulator's tokens, chat messages rendered as `role: content\n`,
//! or a real tokenizer's). Batches are not emulated: a list field must hold exactly one item.
//! The pooling routes read their own bodies (`crate::api::pooling`) but run as a [`GenRequest`]
//! too.

use hyper::HeaderMap;
use infera_proto::types::Api;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub(crate) mod prompt;
mod sampling;

pub use sampling::{LogprobRequest, Sampling};

/// Tokens generated when a request does not say.
pub const DEFAULT_MAX_TOKENS: u32 = 16;

/// A data-plane request, whatever its route.
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    /// `rid`, if the client chose one.
    pub rid: Option<String>,
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Tokens to generate.
    pub max_new_tokens: u32,
    /// The sampling parameters SGLang checks, `n`, stop strings and logprob requests.
    pub sampling: Sampling,
    /// SSE or one JSON body.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `model`, echoed back.
    pub model: Option<String>,
    /// `cache_salt`: the prompt's pages are a namespace of their own in the prefix cache, as in
    /// SGLang's radix cache (an empty salt is none, as SGLang normalises it).
    pub cache_salt: Option<String>,
    /// PD and DP fields.
    pub pd: PdFields,
    /// Tracing headers, recorded in the request log.
    pub trace: TraceHeaders,
}

/// The headers a router forwards for tracing, as received (the request log records them so
/// tests can see what each leg carried).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceHeaders {
    /// W3C `traceparent`.
    pub traceparent: Option<String>,
    /// W3C `tracestate`.
    pub tracestate: Option<String>,
    /// `x-request-id`.
    pub x_request_id: Option<String>,
    /// Whether it carried `Authorization` (SGLang's `--api-key`; the value is not kept).
    pub authorization: bool,
}

impl InputError {
    /// Whether SGLang refuses this before reading the request (FastAPI's request validation:
    /// unparsable JSON, a missing required field, a field of the wrong type), which it answers
    /// with its validation envelope rather than the route's error shape.
    pub fn is_validation(&self, route: Api) -> bool {
        match self {
            InputError::Json(_) | InputError::NotObject | InputError::Field { .. } => true,
            InputError::NoPrompt(_) => route != Api::Generate,
            _ => false,
        }
    }
}

impl TraceHeaders {
    /// The tracing headers of `headers` (values that are not visible ASCII are skipped).
    pub fn of(headers: &HeaderMap) -> Self {
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Self {
            traceparent: get("traceparent"),
            tracestate: get("tracestate"),
            x_request_id: get("x-request-id"),
            authorization: headers.contains_key("authorization"),
        }
    }
}

/// The PD and DP-rank fields a router injects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PdFields {
    /// `bootstrap_host`.
    pub bootstrap_host: Option<String>,
    /// `bootstrap_port` (`null` ⇒ the prefill's own).
    pub bootstrap_port: Option<u16>,
    /// `bootstrap_room`.
    pub bootstrap_room: Option<u64>,
    /// `routed_dp_rank`, `data_parallel_rank`, or header `X-Data-Parallel-Rank` (OpenAI routes).
    pub routed_dp_rank: Option<i64>,
    /// `disagg_prefill_dp_rank`.
    pub disagg_prefill_dp_rank: Option<i64>,
}

/// A body that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The body could not be read.
    #[error(transparent)]
    Body(#[from] crate::server::BodyError),
    /// Not JSON.
    #[error("invalid JSON body: {0}")]
    Json(#[source] serde_json::Error),
    /// Not a JSON object.
    #[error("the request body must be a JSON object")]
    NotObject,
    /// A field of the wrong type.
    #[error("{key}: {source}")]
    Field {
        /// The body's key.
        key: &'static str,
        /// Why its value does not deserialise.
        #[source]
        source: serde_json::Error,
    },
    /// A batch (list of several prompts, rooms, …).
    #[error("{key}: batched requests are not supported by infera-sim (lists must hold one item)")]
    Batch {
        /// The body's key that holds a list of several items.
        key: &'static str,
    },
    /// No prompt.
    #[error("{0}")]
    NoPrompt(&'static str),
    /// A request SGLang refuses after reading it (a sampling parameter out of range, a prompt
    /// longer than the context); the message is SGLang's.
    #[error("{0}")]
    Invalid(String),
    /// The prompt cannot be rendered with the chat template (SGLang answers 400 too).
    #[error("{0}")]
    Tokenize(String),
    /// A list where SGLang takes only a string for a single prompt (`GenerateReqInput`).
    #[error("{key} should be a string for a single request.")]
    SingleRequestList {
        /// The body's key.
        key: &'static str,
    },
    /// `X-Data-Parallel-Rank` is not an integer.
    #[error("X-Data-Parallel-Rank: not an integer")]
    RankHeader,
}

/// Parses a request body for `route`; with a tokenizer the prompt is what SGLang would prefill.
pub fn parse(
    route: Api,
    headers: &HeaderMap,
    body: &[u8],
    tokenizer: Option<&infera_tokenize::Tokenizer>,
) -> Result<GenRequest, InputError> {
    let value: Value = serde_json::from_slice(body).map_err(InputError::Json)?;
    let Value::Object(_) = &value else { return Err(InputError::NotObject) };
    let b = &value;
    let prompt = prompt::of_route(route, b, tokenizer)?;
    let sampling = Sampling::of(route, b);
    let mut pd = PdFields {
        bootstrap_host: one(b, "bootstrap_host")?,
        bootstrap_port: one(b, "bootstrap_port")?,
        bootstrap_room: one(b, "bootstrap_room")?,
        routed_dp_rank: one::<i64>(b, "routed_dp_rank")?.or(one(b, "data_parallel_rank")?),
        disagg_prefill_dp_rank: one(b, "disagg_prefill_dp_rank")?,
    };
    if route != Api::Generate
        && let Some(h) = headers.get("x-data-parallel-rank")
    {
        let rank = h.to_str().ok().and_then(|s| s.trim().parse().ok()).ok_or(InputError::RankHeader)?;
        pd.routed_dp_rank = Some(rank);
    }
    let prompt = if prompt.is_empty() { vec![0] } else { prompt };
    Ok(GenRequest {
        // SGLang's ResponsesRequest names its id `request_id`; its Anthropic request has none.
        rid: match route {
            Api::Responses => field(b, "request_id")?.or(one(b, "rid")?),
            Api::Messages => None,
            _ => one(b, "rid")?,
        },
        prompt,
        max_new_tokens: sampling.max_new_tokens.map_or(DEFAULT_MAX_TOKENS, |m| m.max(0.0) as u32),
        sampling,
        stream: field::<bool>(b, "stream")?.unwrap_or(false),
        include_usage: b.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false),
        model: field(b, "model")?,
        cache_salt: cache_salt(route, b)?,
        pd,
        trace: TraceHeaders::of(headers),
    })
}

/// An optional field (`null` = absent).
pub(crate) fn field<T: DeserializeOwned>(body: &Value, key: &'static str) -> Result<Option<T>, InputError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            serde_json::from_value(v.clone()).map(Some).map_err(|source| InputError::Field { key, source })
        }
    }
}

/// `cache_salt` as SGLang normalises it: a string for a single prompt, a list (of one: batches
/// are not emulated) for a prompt given as a list; empty is none.
fn cache_salt(route: Api, b: &Value) -> Result<Option<String>, InputError> {
    const KEY: &str = "cache_salt";
    let listed_prompt = match route {
        Api::Generate => {
            b.get("text").is_some_and(Value::is_array)
                || b.get("input_ids")
                    .and_then(Value::as_array)
                    .is_some_and(|ids| ids.iter().any(Value::is_array))
        }
        Api::Completions => {
            b.get("prompt").and_then(Value::as_array).is_some_and(|p| p.iter().any(|x| !x.is_number()))
        }
        Api::ChatCompletions
        | Api::Responses
        | Api::Messages
        | Api::Embeddings
        | Api::Rerank
        | Api::Classify => false,
    };
    if b.get(KEY).is_some_and(Value::is_array) && !listed_prompt {
        return Err(InputError::SingleRequestList { key: KEY });
    }
    Ok(one::<String>(b, KEY)?.filter(|s| !s.is_empty()))
}

/// An optional field given as a scalar or as a list of exactly one item.
pub(crate) fn one<T: DeserializeOwned>(body: &Value, key: &'static str) -> Result<Option<T>, InputError> {
    match body.get(key) {
        Some(Value::Array(items))
            if !items.is_empty() && serde_json::from_value::<T>(body[key].clone()).is_err() =>
        {
            if items.len() > 1 {
                return Err(InputError::Batch { key });
            }
            match &items[0] {
                Value::Null => Ok(None),
                v => serde_json::from_value(v.clone())
                    .map(Some)
                    .map_err(|source| InputError::Field { key, source }),
            }
        }
        _ => field(body, key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_json(route: Api, body: Value) -> Result<GenRequest, InputError> {
        parse(route, &HeaderMap::new(), body.to_string().as_bytes(), None)
    }

    #[test]
    fn the_cache_salt_is_kept_and_an_empty_one_dropped() {
        let salt = |v: Value| parse_json(Api::Generate, serde_json::json!({"text": "ab", "cache_salt": v}));
        let batch_salt =
            |v: Value| parse_json(Api::Generate, serde_json::json!({"text": ["ab"], "cache_salt": v}));
        assert_eq!(salt("t1".into()).unwrap().cache_salt.as_deref(), Some("t1"));
        assert_eq!(salt("".into()).unwrap().cache_salt, None);
        let single = salt(serde_json::json!(["t1"])).unwrap_err();
        assert_eq!(
            single.to_string(),
            "cache_salt should be a string for a single request.",
            "as SGLang says"
        );
        assert_eq!(batch_salt(serde_json::json!(["t1"])).unwrap().cache_salt.as_deref(), Some("t1"));
        assert!(matches!(batch_salt(serde_json::json!(["a", "b"])), Err(InputError::Batch { .. })));
        let c = parse_json(Api::ChatCompletions, serde_json::json!({"messages": [], "cache_salt": "t2"}));
        assert_eq!(c.unwrap().cache_salt.as_deref(), Some("t2"));
    }

    #[test]
    fn each_route_yields_a_prompt_and_a_length() {
        let g = parse_json(
            Api::Generate,
            serde_json::json!({"text": "abcdefgh", "sampling_params": {"max_new_tokens": 3}, "stream": true}),
        )
        .unwrap();
        assert_eq!((g.prompt.len(), g.max_new_tokens, g.stream), (2, 3, true));
        let g = parse_json(Api::Generate, serde_json::json!({"input_ids": [[1, 2, 3]]})).unwrap();
        assert_eq!((g.prompt, g.max_new_tokens), (vec![1, 2, 3], DEFAULT_MAX_TOKENS));
        let c = parse_json(
            Api::ChatCompletions,
            serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                               "stream_options": {"include_usage": true}}),
        )
        .unwrap();
        assert_eq!((c.prompt.len(), c.max_new_tokens, c.include_usage), (3, 5, true), "user: hi\\n");
        let c =
            parse_json(Api::Completions, serde_json::json!({"prompt": [[5, 6]], "max_tokens": 1})).unwrap();
        assert_eq!(c.prompt, [5, 6]);
        let r = parse_json(Api::Responses, serde_json::json!({"input": "hello"})).unwrap();
        assert_eq!(r.prompt.len(), 3, "user: hello\\n");
    }

    #[test]
    fn pd_fields_aliases_and_batches() {
        let g = parse_json(
            Api::Generate,
            serde_json::json!({"text": "x", "bootstrap_host": "10.0.0.5", "bootstrap_port": null,
                               "bootstrap_room": [5163923463823455142_u64], "data_parallel_rank": 3}),
        )
        .unwrap();
        assert_eq!(g.pd.bootstrap_host.as_deref(), Some("10.0.0.5"));
        assert_eq!(g.pd.bootstrap_port, None);
        assert_eq!(g.pd.bootstrap_room, Some(5163923463823455142));
        assert_eq!(g.pd.routed_dp_rank, Some(3));
        let batch = parse_json(Api::Generate, serde_json::json!({"text": ["a", "b"]}));
        assert!(matches!(batch, Err(InputError::Batch { key: "text" })));
        assert!(matches!(parse_json(Api::Generate, serde_json::json!({})), Err(InputError::NoPrompt(_))));
        let mut headers = HeaderMap::new();
        headers.insert("x-data-parallel-rank", "2".parse().unwrap());
        let body = serde_json::json!({"messages": [], "routed_dp_rank": 1}).to_string();
        assert_eq!(
            parse(Api::ChatCompletions, &headers, body.as_bytes(), None).unwrap().pd.routed_dp_rank,
            Some(2)
        );
        assert_eq!(parse(Api::Generate, &headers, br#"{"text":"x"}"#, None).unwrap().pd.routed_dp_rank, None);
    }

    #[test]
    fn tracing_headers_are_kept_as_received() {
        let mut headers = HeaderMap::new();
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        headers.insert("traceparent", parent.parse().unwrap());
        headers.insert("x-request-id", "r-1".parse().unwrap());
        let g = parse(Api::Generate, &headers, br#"{"text":"x"}"#, None).unwrap();
        assert_eq!(g.trace.traceparent.as_deref(), Some(parent));
        assert_eq!(g.trace.x_request_id.as_deref(), Some("r-1"));
        assert_eq!(g.trace.tracestate, None);
        assert_eq!(
            parse_json(Api::Generate, serde_json::json!({"text": "x"})).unwrap().trace,
            TraceHeaders::default()
        );
    }
}

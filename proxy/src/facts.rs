//! Routing facts: what the proxy derives from a request before asking control — the request
//! id, the model, the input-token count (estimated from the text; exact once the `tokens` module
//! has the prompt's token ids from the model's tokenizer), the session key and whether the answer
//! streams. The body is kept as a JSON object with its key
//! order, so what reaches the workers is the client's JSON plus the injected keys.

use std::sync::Arc;

use http::HeaderMap;
use infera_proto::types::{Api, ModelName, RequestId, SessionKey};
use serde_json::{Map, Value};

use crate::error::ProxyError;

/// Bytes of text per estimated token (no tokenizer for the model).
pub const BYTES_PER_TOKEN: u64 = 4;
/// Tokens a chat message costs beyond its text (role markers, template).
const TOKENS_PER_MESSAGE: u64 = 4;

/// What routing needs to know about one request.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Which generation API the request came in on.
    pub api: Api,
    /// `x-request-id`, or a new one.
    pub request_id: RequestId,
    /// The model (for `/generate`, the body's `model`, which is not forwarded, or the
    /// deployment's only model).
    pub model: Option<ModelName>,
    /// Input tokens: exact when `token_ids` is set, else estimated from the text.
    pub input_tokens: u64,
    /// The prompt's token ids as SGLang prefills them, when the proxy has a tokenizer and the
    /// prompt is unambiguous (set by `tokens::attach`).
    pub token_ids: Option<Arc<[u32]>>,
    /// Session key: `x-session-id` header, else `user`, else `prompt_cache_key`, else (on
    /// `/v1/messages`) `metadata.user_id`.
    pub session: Option<SessionKey>,
    /// The body's `cache_salt`, the namespace SGLang caches (and hashes) the prompt's pages in.
    pub cache_salt: CacheSalt,
    /// The LoRA adapter the prompt is served with: the body's `lora_path` here, the one `model`
    /// names once the server resolved it against the target list ([`crate::lora`]). Its pages
    /// are hashed in the adapter's namespace.
    pub adapter: crate::lora::Adapter,
    /// Whether the answer is an SSE stream.
    pub stream: bool,
    /// The caller's tenant (its API key's, [`crate::keys::Caller::tenant`]): a request's own
    /// `rid` is scoped to it on the engines. `None` without `--api-keys` (one tenant).
    pub tenant: Option<Arc<str>>,
    /// What control's fleet admission weighs it by: its class (`x-infera-service-class`, else
    /// its API key's), its tenant (the key's name) and when it arrived.
    pub admission: infera_proto::types::Admission,
    /// The request body.
    pub body: Map<String, Value>,
}

/// The header naming a request's service class.
pub const SERVICE_CLASS_HEADER: &str = "x-infera-service-class";

/// A request's `cache_salt` (SGLang's `GenerateReqInput` and OpenAI requests): its pages are a
/// namespace of their own in SGLang's radix cache, and its KV events hash them after the salt's
/// seed (`infera_kv::hash::seed_of`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CacheSalt {
    /// None, or empty (SGLang's `_normalize_cache_salt` drops an empty salt).
    #[default]
    Unsalted,
    /// One salt for the prompt.
    Salted(String),
    /// A list, one salt per prompt of a batch (SGLang refuses a list for a single request): no
    /// one namespace for the pages.
    PerPrompt,
}

impl CacheSalt {
    fn of(body: &Map<String, Value>) -> Result<Self, ProxyError> {
        let one = |s: &str| if s.is_empty() { Self::Unsalted } else { Self::Salted(s.to_owned()) };
        match body.get("cache_salt") {
            None | Some(Value::Null) => Ok(Self::Unsalted),
            Some(Value::String(s)) => Ok(one(s)),
            Some(Value::Array(list)) if list.iter().all(Value::is_string) => Ok(Self::PerPrompt),
            Some(_) => Err(ProxyError::BadRequest("cache_salt must be a string or a list of strings")),
        }
    }
}

/// Derives the facts from a request's headers and body.
pub fn derive(api: Api, headers: &HeaderMap, body: &[u8]) -> Result<Facts, ProxyError> {
    let value: Value = serde_json::from_slice(body).map_err(ProxyError::BadJson)?;
    let Value::Object(mut body) = value else {
        return Err(ProxyError::BadRequest("request body must be a JSON object"));
    };
    crate::bounds::check_body_ids(&body)?;
    for name in ["x-request-id", "x-session-id"] {
        if let Some(v) = headers.get(name) {
            crate::bounds::check_header(name, v)?;
        }
    }
    let model = match api {
        // SGLang's /generate has no model field; a client may name one for routing.
        Api::Generate => body.remove("model"),
        _ => body.get("model").cloned(),
    };
    let model = match model {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) if !m.trim().is_empty() => Some(ModelName::new(m)),
        Some(_) => return Err(ProxyError::BadRequest("model must be a non-empty string")),
    };
    // SGLang's rerank has no `model` field (a client may name one for routing); its other
    // OpenAI-style routes take one.
    if model.is_none() && !matches!(api, Api::Generate | Api::Rerank) {
        return Err(ProxyError::BadRequest("model is required"));
    }
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        // A pooling answer is one JSON body, whatever the client asked.
        Some(Value::Bool(b)) => *b && api.generates(),
        Some(_) => return Err(ProxyError::BadRequest("stream must be a boolean")),
    };
    let header =
        |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty());
    let request_id = client_request_id(headers).unwrap_or_else(new_request_id);
    // An empty `user` names no session: `prompt_cache_key` still may.
    let field =
        |name: &str| body.get(name).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    // Anthropic's clients name their user in `metadata.user_id`.
    let anthropic_user = || {
        let user = body.get("metadata").and_then(|m| m.get("user_id")).and_then(Value::as_str);
        user.filter(|s| api == Api::Messages && !s.is_empty()).map(str::to_owned)
    };
    let session = header("x-session-id")
        .map(str::to_owned)
        .or_else(|| field("user"))
        .or_else(|| field("prompt_cache_key"))
        .or_else(anthropic_user);
    let session = session.map(SessionKey::new);
    let input_tokens = estimate_tokens(api, &body)?;
    let cache_salt = CacheSalt::of(&body)?;
    let class = match headers.get(SERVICE_CLASS_HEADER) {
        None => None,
        Some(v) => match v.to_str().map(str::trim) {
            Ok(c) if infera_proto::types::ServiceClassName::is_valid(c) => {
                Some(infera_proto::types::ServiceClassName::new(c))
            }
            _ => return Err(ProxyError::BadRequest("x-infera-service-class must be 1–64 of [A-Za-z0-9._-]")),
        },
    };
    let admission = infera_proto::types::Admission {
        class,
        arrived: Some(std::time::SystemTime::now()),
        ..Default::default()
    };
    Ok(Facts {
        api,
        request_id,
        model,
        input_tokens,
        token_ids: None,
        session,
        cache_salt,
        adapter: crate::lora::Adapter::in_body(&body),
        stream,
        tenant: None,
        admission,
        body,
    })
}

/// `admission` with its caller's part: the key's name as the tenant, and the key's class when
/// the request named none.
pub fn with_caller(
    admission: infera_proto::types::Admission,
    caller: Option<&crate::keys::Caller>,
) -> infera_proto::types::Admission {
    use infera_proto::types::{ServiceClassName, TenantId};
    let Some(caller) = caller else { return admission };
    infera_proto::types::Admission {
        tenant: Some(TenantId::new(caller.name.clone())),
        class: admission.class.or_else(|| caller.class.clone().map(ServiceClassName::new)),
        ..admission
    }
}

/// The client's `x-request-id`, when it is one the proxy keeps (visible ASCII, 1–256 bytes).
pub fn client_request_id(headers: &HeaderMap) -> Option<RequestId> {
    let id = headers.get("x-request-id")?.to_str().ok()?.trim();
    (!id.is_empty() && id.len() <= MAX_REQUEST_ID).then(|| RequestId::new(id))
}

/// The longest client request id kept.
const MAX_REQUEST_ID: usize = 256;

/// A fresh request id: 128 random bits, hex.
pub fn new_request_id() -> RequestId {
    RequestId::new(format!("{:032x}", rand::random::<u128>()))
}

fn estimate_tokens(api: Api, body: &Map<String, Value>) -> Result<u64, ProxyError> {
    let text_tokens = |bytes: u64| bytes.div_ceil(BYTES_PER_TOKEN);
    Ok(match api {
        Api::ChatCompletions => {
            let Some(Value::Array(messages)) = body.get("messages") else {
                return Err(ProxyError::BadRequest("messages must be an array"));
            };
            messages.iter().map(|m| TOKENS_PER_MESSAGE + text_tokens(content_bytes(m.get("content")))).sum()
        }
        Api::Completions => match body.get("prompt") {
            Some(p) => text_tokens(content_bytes(Some(p))),
            None => return Err(ProxyError::BadRequest("prompt is required")),
        },
        Api::Generate => match (body.get("input_ids"), body.get("text")) {
            (Some(Value::Array(ids)), _) => {
                ids.iter().map(|x| if let Value::Array(inner) = x { inner.len() as u64 } else { 1 }).sum()
            }
            (_, Some(t)) => text_tokens(content_bytes(Some(t))),
            _ => return Err(ProxyError::BadRequest("text or input_ids is required")),
        },
        Api::Responses => {
            text_tokens(content_bytes(body.get("input")) + content_bytes(body.get("instructions")))
        }
        // Anthropic's `max_tokens` is required and positive (SGLang's `AnthropicMessagesRequest`,
        // python/sglang/srt/entrypoints/anthropic/protocol.py); `system` is the leading system
        // message SGLang builds.
        Api::Messages => {
            if body.get("max_tokens").and_then(Value::as_i64).is_none_or(|n| n <= 0) {
                return Err(ProxyError::BadRequest("max_tokens is required and must be a positive integer"));
            }
            let Some(Value::Array(messages)) = body.get("messages") else {
                return Err(ProxyError::BadRequest("messages must be an array"));
            };
            let system =
                body.get("system").map_or(0, |s| TOKENS_PER_MESSAGE + text_tokens(content_bytes(Some(s))));
            system
                + messages
                    .iter()
                    .map(|m| TOKENS_PER_MESSAGE + text_tokens(content_bytes(m.get("content"))))
                    .sum::<u64>()
        }
        Api::Embeddings | Api::Classify => match body.get("input") {
            Some(Value::Array(items)) if items.first().is_some_and(Value::is_number) => items.len() as u64,
            Some(Value::Array(items)) if items.first().is_some_and(Value::is_array) => {
                items.iter().map(|x| x.as_array().map_or(0, |ids| ids.len() as u64)).sum()
            }
            Some(input @ (Value::String(_) | Value::Array(_))) => text_tokens(content_bytes(Some(input))),
            _ => return Err(ProxyError::BadRequest("input must be a string, strings or token ids")),
        },
        // The query is scored with each document: one pass per document.
        Api::Rerank => match (body.get("query"), body.get("documents")) {
            (Some(query), Some(Value::Array(documents))) => {
                let query = text_tokens(content_bytes(Some(query)));
                documents.iter().map(|d| query + text_tokens(content_bytes(Some(d)))).sum()
            }
            _ => return Err(ProxyError::BadRequest("query and a list of documents are required")),
        },
    })
}

/// Bytes of text in a content value: a string, an array of strings or of `{"text": …}` parts,
/// or message items with `content`.
fn content_bytes(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::String(s)) => s.len() as u64,
        Some(Value::Array(parts)) => parts.iter().map(|p| content_bytes(Some(p))).sum(),
        Some(Value::Object(o)) => {
            content_bytes(o.get("text"))
                + content_bytes(o.get("content"))
                + content_bytes(o.get("input_text"))
        }
        _ => 0,
    }
}

impl Facts {
    /// The model these facts are served by (the base model of the adapter `model` names, or the
    /// deployment's only model), with the adapter recorded ([`crate::lora`]); the body's
    /// `lora_path` stands when `model` names none.
    pub fn served_by(mut self, list: &crate::targets::TargetList) -> (Option<ModelName>, Self) {
        let Some(named) = &self.model else { return (list.only_model(), self) };
        let crate::lora::Resolved { base, adapter } = list.resolve(named);
        if adapter.is_some() {
            self.adapter = adapter;
        }
        (Some(base), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(api: Api, body: &str) -> Result<Facts, ProxyError> {
        derive(api, &HeaderMap::new(), body.as_bytes())
    }

    #[test]
    fn chat_facts() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", "abc".parse().unwrap());
        let body =
            r#"{"model":"m","messages":[{"role":"user","content":"12345678"}],"stream":true,"user":"u1"}"#;
        let f = derive(Api::ChatCompletions, &h, body.as_bytes()).unwrap();
        assert_eq!(f.request_id.as_str(), "abc");
        assert_eq!(f.model.as_ref().map(ModelName::as_str), Some("m"));
        assert_eq!(f.input_tokens, 4 + 2);
        assert_eq!(f.session.as_ref().map(SessionKey::as_str), Some("u1"));
        assert!(f.stream);
        // Key order is kept.
        assert_eq!(f.body.keys().collect::<Vec<_>>(), ["model", "messages", "stream", "user"]);
    }

    #[test]
    fn messages_need_max_tokens_and_count_the_system_prompt() {
        let f = facts(
            Api::Messages,
            r#"{"model":"m","max_tokens":8,"system":"12345678","messages":[{"role":"user","content":[{"type":"text","text":"1234"}]}],"stream":true}"#,
        )
        .unwrap();
        assert_eq!(f.input_tokens, (4 + 2) + (4 + 1));
        assert!(f.stream);
        assert_eq!(f.session, None);
        let user = r#"{"model":"m","max_tokens":1,"messages":[],"metadata":{"user_id":"u7"}}"#;
        assert_eq!(facts(Api::Messages, user).unwrap().session.as_ref().map(SessionKey::as_str), Some("u7"));
        let chat = r#"{"model":"m","messages":[],"metadata":{"user_id":"u7"}}"#;
        assert_eq!(
            facts(Api::ChatCompletions, chat).unwrap().session,
            None,
            "OpenAI's metadata is not a user"
        );
        for bad in [
            r#"{"model":"m","messages":[]}"#,
            r#"{"model":"m","max_tokens":0,"messages":[]}"#,
            r#"{"model":"m","max_tokens":"8","messages":[]}"#,
            r#"{"model":"m","max_tokens":8}"#,
            r#"{"max_tokens":8,"messages":[]}"#,
        ] {
            assert!(matches!(facts(Api::Messages, bad), Err(ProxyError::BadRequest(_))), "{bad}");
        }
    }

    #[test]
    fn generate_takes_model_out_and_counts_ids() {
        let f = facts(Api::Generate, r#"{"model":"m","input_ids":[1,2,3]}"#).unwrap();
        assert_eq!(f.model.as_ref().map(ModelName::as_str), Some("m"));
        assert!(!f.body.contains_key("model"));
        assert_eq!(f.input_tokens, 3);
        assert_eq!(facts(Api::Generate, r#"{"text":"abcdefgh"}"#).unwrap().model, None);
    }

    #[test]
    fn bad_bodies_are_rejected() {
        assert!(matches!(facts(Api::ChatCompletions, "{"), Err(ProxyError::BadJson(_))));
        assert!(matches!(facts(Api::ChatCompletions, "[]"), Err(ProxyError::BadRequest(_))));
        assert!(matches!(facts(Api::ChatCompletions, r#"{"messages":[]}"#), Err(ProxyError::BadRequest(_))));
        assert!(matches!(facts(Api::ChatCompletions, r#"{"model":"m"}"#), Err(ProxyError::BadRequest(_))));
        assert!(matches!(
            facts(Api::Completions, r#"{"model":5,"prompt":"x"}"#),
            Err(ProxyError::BadRequest(_))
        ));
        assert!(matches!(
            facts(Api::Completions, r#"{"model":"m","prompt":"x","stream":"yes"}"#),
            Err(ProxyError::BadRequest(_))
        ));
    }

    #[test]
    fn an_empty_user_leaves_the_session_to_prompt_cache_key() {
        let f = facts(Api::Completions, r#"{"model":"m","prompt":"x","user":"","prompt_cache_key":"k"}"#)
            .unwrap();
        assert_eq!(f.session.as_ref().map(SessionKey::as_str), Some("k"));
    }

    #[test]
    fn the_cache_salt_is_read_as_sglang_normalises_it() {
        let salt = |v: Value| {
            let body = serde_json::json!({"model": "m", "prompt": "x", "cache_salt": v});
            facts(Api::Completions, &body.to_string()).map(|f| f.cache_salt)
        };
        let salted = |s: &str| CacheSalt::Salted(s.to_owned());
        assert_eq!(
            facts(Api::Completions, r#"{"model":"m","prompt":"x"}"#).unwrap().cache_salt,
            CacheSalt::Unsalted
        );
        assert_eq!(salt(Value::Null).unwrap(), CacheSalt::Unsalted);
        assert_eq!(salt("".into()).unwrap(), CacheSalt::Unsalted, "an empty salt is none");
        assert_eq!(salt("t1".into()).unwrap(), salted("t1"));
        assert_eq!(salt(serde_json::json!(["t1"])).unwrap(), CacheSalt::PerPrompt, "a batch's");
        assert_eq!(salt(serde_json::json!(["t1", "t2"])).unwrap(), CacheSalt::PerPrompt);
        assert!(matches!(salt(7.into()), Err(ProxyError::BadRequest(_))));
        assert!(matches!(salt(serde_json::json!(["t1", 7])), Err(ProxyError::BadRequest(_))));
    }

    #[test]
    fn pooling_requests_are_counted_and_never_stream() {
        let e = facts(Api::Embeddings, r#"{"model":"m","input":["abcd","abcdefgh"],"stream":true}"#).unwrap();
        assert_eq!((e.input_tokens, e.stream), (3, false));
        assert_eq!(facts(Api::Embeddings, r#"{"model":"m","input":[1,2,3]}"#).unwrap().input_tokens, 3);
        assert_eq!(facts(Api::Classify, r#"{"model":"m","input":[[1,2],[3]]}"#).unwrap().input_tokens, 3);
        assert!(matches!(facts(Api::Embeddings, r#"{"model":"m"}"#), Err(ProxyError::BadRequest(_))));
        assert!(matches!(facts(Api::Classify, r#"{"input":"x"}"#), Err(ProxyError::BadRequest(_))));
        // Rerank: no model needed; the query counts once per document.
        let r = facts(Api::Rerank, r#"{"query":"abcd","documents":["abcd","abcdefgh"]}"#).unwrap();
        assert_eq!((r.input_tokens, r.model), (2 + 3, None));
        assert!(matches!(facts(Api::Rerank, r#"{"query":"q"}"#), Err(ProxyError::BadRequest(_))));
    }

    #[test]
    fn new_ids_are_generated() {
        let f = facts(Api::Completions, r#"{"model":"m","prompt":"x"}"#).unwrap();
        assert_eq!(f.request_id.as_str().len(), 32);
    }
}

//! The proxy's request parsing (`facts::derive`, then the tokenizer) over arbitrary bytes, JSON
//! mutated from valid bodies and odd headers: never a panic, a 4xx naming the field, or facts
//! that say what the body says.

use http::{HeaderMap, HeaderValue};
use infera_proto::types::Api;
use infera_proxy::error::ProxyError;
use infera_proxy::facts::{Facts, derive};
use infera_tokenize::Outcome;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Value, json};

use crate::bodies::{api, header_bytes, mutated, text, valid};
use crate::tokenizer::tokenizer;

mod bodies;
mod tokenizer;

fn config(cases: u32) -> ProptestConfig {
    let persistence = FileFailurePersistence::Direct("proptest-regressions/facts_fuzz.txt");
    ProptestConfig { cases, failure_persistence: Some(Box::new(persistence)), ..ProptestConfig::default() }
}

/// What `derive` must answer for a body that is JSON: the model and `stream`, or the message.
fn expected(api: Api, v: &Value) -> Result<(Option<String>, bool), &'static str> {
    let Value::Object(o) = v else { return Err("request body must be a JSON object") };
    let model = match o.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) if !m.trim().is_empty() => Some(m.clone()),
        Some(_) => return Err("model must be a non-empty string"),
    };
    if model.is_none() && !matches!(api, Api::Generate | Api::Rerank) {
        return Err("model is required");
    }
    let stream = match o.get("stream") {
        None | Some(Value::Null) => false,
        // A pooling answer never streams.
        Some(Value::Bool(b)) => *b && api.generates(),
        Some(_) => return Err("stream must be a boolean"),
    };
    match api {
        Api::ChatCompletions if !o.get("messages").is_some_and(Value::is_array) => {
            Err("messages must be an array")
        }
        Api::Messages if o.get("max_tokens").and_then(Value::as_i64).is_none_or(|n| n <= 0) => {
            Err("max_tokens is required and must be a positive integer")
        }
        Api::Messages if !o.get("messages").is_some_and(Value::is_array) => Err("messages must be an array"),
        Api::Completions if !o.contains_key("prompt") => Err("prompt is required"),
        Api::Generate if !o.get("input_ids").is_some_and(Value::is_array) && !o.contains_key("text") => {
            Err("text or input_ids is required")
        }
        Api::Embeddings | Api::Classify if !o.get("input").is_some_and(|i| i.is_string() || i.is_array()) => {
            Err("input must be a string, strings or token ids")
        }
        Api::Rerank if !(o.contains_key("query") && o.get("documents").is_some_and(Value::is_array)) => {
            Err("query and a list of documents are required")
        }
        _ => Ok((model, stream)),
    }
}

/// Derives, checks the outcome against the body, and tokenizes what was accepted.
fn check(api: Api, headers: &HeaderMap, body: &[u8]) -> Result<Option<Facts>, TestCaseError> {
    let result = derive(api, headers, body);
    if let Err(e) = &result {
        prop_assert!(e.status().is_client_error(), "{e} is a {}", e.status());
    }
    let parsed = serde_json::from_slice::<Value>(body);
    let want = parsed.as_ref().map(|v| expected(api, v));
    match (result, want) {
        (Err(ProxyError::BadJson(_)), Err(_)) => Ok(None),
        (Err(ProxyError::BadRequest(got)), Ok(Err(want))) => {
            prop_assert_eq!(got, want);
            Ok(None)
        }
        (Ok(f), Ok(Ok((model, stream)))) => {
            prop_assert_eq!(f.model.as_ref().map(|m| m.as_str().to_owned()), model);
            prop_assert_eq!(f.stream, stream);
            let mut object = parsed.ok().and_then(|v| v.as_object().cloned()).unwrap_or_default();
            if api == Api::Generate {
                object.remove("model");
            }
            prop_assert_eq!(&f.body, &object, "the body goes on as sent (`model` out of /generate)");
            prop_assert!(
                f.input_tokens <= 2 * body.len() as u64 + 4,
                "{} tokens of {} bytes",
                f.input_tokens,
                body.len()
            );
            let session = f.session.as_ref().map(|s| s.as_str().to_owned());
            if let Ok(Outcome::Tokens(t)) = tokenizer().tokenize(api, &f.body, session.as_deref()) {
                prop_assert!(
                    t.ids.len() <= 4 * body.len() + 64,
                    "{} ids of {} bytes",
                    t.ids.len(),
                    body.len()
                );
            }
            Ok(Some(f))
        }
        (got, want) => Err(TestCaseError::fail(format!("{got:?}, wanted {want:?}"))),
    }
}

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn arbitrary_bytes_are_a_bad_json_or_bad_request(
        api in api(), body in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        check(api, &HeaderMap::new(), &body)?;
    }

    #[test]
    fn valid_bodies_are_accepted_as_sent(
        (api, body) in api().prop_flat_map(|a| valid(a).prop_map(move |b| (a, b))),
    ) {
        let f = check(api, &HeaderMap::new(), Value::Object(body).to_string().as_bytes())?;
        prop_assert!(f.is_some(), "a valid body was refused");
    }

    #[test]
    fn mutated_bodies_are_accepted_or_refused_by_field((api, body) in mutated()) {
        check(api, &HeaderMap::new(), &body)?;
    }

    #[test]
    fn odd_request_and_session_headers(
        id in header_bytes(), session in header_bytes(), user in text(), key in text(),
    ) {
        let mut headers = HeaderMap::new();
        for (name, bytes) in [("x-request-id", &id), ("x-session-id", &session)] {
            if let Ok(v) = HeaderValue::from_bytes(bytes) {
                headers.insert(name, v);
            }
        }
        let body = json!({"model": "m", "prompt": "p", "user": user, "prompt_cache_key": key}).to_string();
        let too_long = ["x-request-id", "x-session-id"]
            .into_iter()
            .find(|name| headers.get(*name).is_some_and(|v| v.as_bytes().len() > 256));
        if let Some(name) = too_long {
            let result = derive(Api::Completions, &headers, body.as_bytes());
            let refused = matches!(&result, Err(ProxyError::TooLong { what, limit: 256 }) if *what == name);
            prop_assert!(refused, "{:?} for a {} over 256 bytes", result, name);
            return Ok(());
        }
        let f = check(Api::Completions, &headers, body.as_bytes())?.expect("a valid body");
        let header = |name: &str| {
            let v = headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
            v.filter(|v| !v.is_empty()).map(str::to_owned)
        };
        match header("x-request-id").filter(|id| id.len() <= 256) {
            Some(id) => prop_assert_eq!(f.request_id.as_str(), id),
            None => {
                let new = f.request_id.as_str();
                prop_assert!(new.len() == 32 && new.bytes().all(|b| b.is_ascii_hexdigit()), "{}", new);
            }
        }
        let want = header("x-session-id").or([user, key].into_iter().find(|s| !s.is_empty()));
        prop_assert_eq!(f.session.map(|s| s.as_str().to_owned()), want);
    }
}

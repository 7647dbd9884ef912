//! `POST|PUT /v1/rerank` (`OpenAIServingRerank`,
//! python/sglang/srt/entrypoints/openai/serving_rerank.py): the documents scored against the
//! query, best first.
//!
//! SGLang picks the path by the model: a generation model scores each document by the logprobs
//! of "yes" and "no" after a reranker chat template (`_handle_text_reranker_request`: no
//! `meta_info`); a pooling model (`--is-embedding`) is a cross-encoder whose output for each
//! (query, document) pair is the score (`meta_info` per document). The sim cannot see a
//! reranker template, so a generation model is taken to be a decoder-only reranker. Each
//! document's prompt is the query and the document as two user messages, tokenized as a chat
//! prompt (the real chat template when a tokenizer is configured).

use std::sync::Arc;

use infera_proto::types::Api;
use serde_json::{Value, json};

use super::{Failure, Item, Needs, check, heads, meta_info, run};
use crate::api::input::{InputError, TraceHeaders, field, prompt};
use crate::app::App;
use crate::error::ApiError;

/// The answer to `body`.
pub(super) async fn serve(app: &Arc<App>, body: &Value, trace: &TraceHeaders) -> Result<Value, Failure> {
    let query = field::<Value>(body, "query")?.ok_or(InputError::NoPrompt("query: Field required"))?;
    let documents =
        field::<Vec<Value>>(body, "documents")?.ok_or(InputError::NoPrompt("documents: Field required"))?;
    let top_n = field::<i64>(body, "top_n")?;
    let return_documents = field::<bool>(body, "return_documents")?.unwrap_or(true);
    let query_text = content_text("query", &query)?;
    let texts = documents.iter().map(|d| content_text("documents", d)).collect::<Result<Vec<_>, _>>()?;
    if top_n.is_some_and(|n| n < 1) {
        let source = <serde_json::Error as serde::de::Error>::custom(
            "Value error, parameter top_n should be larger than 0.",
        );
        return Err(InputError::Field { key: "top_n", source }.into());
    }
    if let Some(message) = refusal(&query, &documents) {
        return Err(InputError::Invalid(message.into()).into());
    }
    let tokenizer = app.config.tokenizer.as_deref();
    let items = texts
        .iter()
        .map(|doc| {
            let messages = json!({"messages": [
                {"role": "user", "content": query_text}, {"role": "user", "content": doc},
            ]});
            Ok(Item { prompt: prompt::of_route(Api::ChatCompletions, &messages, tokenizer)?, rid: None })
        })
        .collect::<Result<Vec<_>, InputError>>()?;
    check(app, Api::Rerank, &items, Needs::AnyModel, || Ok(()))?;
    let cross_encoder = !app.config.generates();
    let pooled = run(app, Api::Rerank, items, trace).await?;
    if pooled.iter().any(|p| p.aborted) {
        // An aborted input's output has no score: `float(None)` raises `TypeError`.
        let message = "float() argument must be a string or a real number, not 'NoneType'";
        return Err(ApiError::Internal(message.into()).into());
    }
    let mut scored: Vec<(f64, Value)> = pooled
        .iter()
        .zip(&texts)
        .enumerate()
        .map(|(index, (p, doc))| {
            let score = heads::rerank_score(&query_text, doc);
            let mut entry = json!({ "score": score, "index": index });
            if return_documents {
                entry["document"] = documents[index].clone();
            }
            entry["meta_info"] = if cross_encoder { meta_info(app, p) } else { Value::Null };
            (score, entry)
        })
        .collect();
    // Best first; equal scores keep their order (`sort(reverse=True)`, `heapq.nlargest`).
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let keep = top_n.and_then(|n| usize::try_from(n).ok()).unwrap_or(scored.len());
    Ok(Value::Array(scored.into_iter().take(keep).map(|(_, entry)| entry).collect()))
}

/// The text of a `RerankContent`: a string, or the text parts of a content list joined by
/// spaces (`_extract_text_from_content`); anything else is FastAPI's validation error.
fn content_text(key: &'static str, content: &Value) -> Result<String, InputError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .map(|p| p.get("text").and_then(Value::as_str).unwrap_or(""))
                .collect();
            Ok(texts.join(" "))
        }
        _ => Err(InputError::Field {
            key,
            source: <serde_json::Error as serde::de::Error>::custom("Input should be a valid string or list"),
        }),
    }
}

/// `_validate_request`'s verdict, in SGLang's words.
fn refusal(query: &Value, documents: &[Value]) -> Option<&'static str> {
    let empty = |v: &Value| v.as_str().is_some_and(str::is_empty) || v.as_array().is_some_and(Vec::is_empty);
    let blank = |v: &Value| v.as_str().is_some_and(|s| s.trim().is_empty());
    if empty(query) {
        return Some("Query cannot be empty");
    }
    if blank(query) {
        return Some("Query cannot be empty or whitespace only");
    }
    if documents.is_empty() {
        return Some("Documents cannot be empty");
    }
    for doc in documents {
        if empty(doc) {
            return Some("Each document must be a non-empty string");
        }
        if blank(doc) {
            return Some("Each document cannot be empty or whitespace only");
        }
    }
    None
}

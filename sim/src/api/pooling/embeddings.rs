//! `POST /v1/embeddings` (`OpenAIServingEmbedding`,
//! python/sglang/srt/entrypoints/openai/serving_embedding.py): one embedding per input, of the
//! model's hidden size (or `dimensions` on a Matryoshka model), as floats or base64.

use std::sync::Arc;

use serde_json::{Value, json};

use super::input::{self, Input};
use super::{Failure, Needs, check, heads, run, usage};
use crate::api::input::{InputError, TraceHeaders, field};
use crate::app::App;
use crate::config::SimConfig;
use crate::error::ApiError;

/// The answer to `body`.
pub(super) async fn serve(app: &Arc<App>, body: &Value, trace: &TraceHeaders) -> Result<Value, Failure> {
    let route = infera_proto::types::Api::Embeddings;
    let input = Input::of(body, false)?;
    let encoding = field::<String>(body, "encoding_format")?.unwrap_or_else(|| "float".to_owned());
    let dimensions = field::<i64>(body, "dimensions")?;
    // `_validate_request`, then `_convert_to_internal_request`'s pairing check.
    if encoding != "float" && encoding != "base64" {
        let message = format!("encoding_format must be either 'float' or 'base64', got '{encoding}'");
        return Err(InputError::Invalid(message).into());
    }
    if let Some(message) = input.refusal() {
        return Err(InputError::Invalid(message).into());
    }
    let overrides = body.get("embed_overrides").is_some_and(|v| !v.is_null());
    let token_id = body.get("embed_override_token_id").is_some_and(|v| !v.is_null());
    match (overrides, token_id) {
        (true, false) => {
            let message = "embed_override_token_id is required when embed_overrides is provided";
            return Err(InputError::Invalid(message.into()).into());
        }
        (false, true) => {
            let message = "embed_override_token_id requires embed_overrides to be provided";
            return Err(InputError::Invalid(message.into()).into());
        }
        _ => {}
    }
    let prompts = input.prompts(app.config.tokenizer.as_deref())?;
    let items = input::items(body, &input, prompts)?;
    check(app, route, &items, Needs::PoolingModel, || matryoshka(&app.config, dimensions))?;
    let len = dimensions.and_then(|d| u32::try_from(d).ok()).unwrap_or(app.config.model.hidden_size);
    let vectors: Vec<Vec<f32>> = items.iter().map(|i| heads::embedding(&i.prompt, len)).collect();
    let pooled = run(app, route, items, trace).await?;
    if pooled.iter().any(|p| p.aborted) {
        // An aborted input's output has no `embedding`: the handler's `ret_item["embedding"]`
        // raises `KeyError`.
        return Err(ApiError::Internal("'embedding'".into()).into());
    }
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if encoding == "base64" { json!(heads::base64_f32(v)) } else { json!(v) };
            json!({ "embedding": embedding, "index": index, "object": "embedding" })
        })
        .collect();
    // SGLang names the model by its path here (`tokenizer_manager.model_path`).
    Ok(json!({ "data": data, "model": app.config.model_path, "object": "list", "usage": usage(&pooled) }))
}

/// `_validate_for_matryoshka_dim` (python/sglang/srt/managers/tokenizer_manager.py).
fn matryoshka(c: &SimConfig, dimensions: Option<i64>) -> Result<(), ApiError> {
    let Some(d) = dimensions else { return Ok(()) };
    let (m, path) = (&c.model.matryoshka, &c.model_path);
    let refuse = |message: String| Err(ApiError::Input(InputError::Invalid(message)));
    if !m.supported {
        return refuse(format!(
            "Model '{path}' does not support matryoshka representation, changing output dimensions will lead to poor results."
        ));
    }
    if d < 1 {
        return refuse("Requested dimensions must be greater than 0".into());
    }
    if !m.dimensions.is_empty() && !m.dimensions.iter().any(|&x| i64::from(x) == d) {
        return refuse(format!(
            "Model '{path}' only supports {:?} matryoshka dimensions, using other output dimensions will lead to poor results.",
            m.dimensions
        ));
    }
    if d > i64::from(c.model.hidden_size) {
        return refuse(format!(
            "Provided dimensions are greater than max embedding dimension: {}",
            c.model.hidden_size
        ));
    }
    Ok(())
}

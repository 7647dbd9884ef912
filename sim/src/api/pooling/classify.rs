//! `POST /v1/classify` (`OpenAIServingClassify`,
//! python/sglang/srt/entrypoints/openai/serving_classify.py): per input, the probabilities over
//! the model's labels and the likeliest label.

use std::sync::Arc;

use serde_json::{Value, json};

use super::input::{self, Input};
use super::{Failure, Needs, check, heads, run, usage};
use crate::api::input::{InputError, TraceHeaders};
use crate::api::render::unix_secs;
use crate::app::App;

/// The answer to `body`.
pub(super) async fn serve(app: &Arc<App>, body: &Value, trace: &TraceHeaders) -> Result<Value, Failure> {
    let route = infera_proto::types::Api::Classify;
    let input = Input::of(body, true)?;
    if let Some(message) = input.refusal() {
        return Err(InputError::Invalid(message).into());
    }
    let prompts = input.prompts(app.config.tokenizer.as_deref())?;
    let items = input::items(body, &input, prompts)?;
    check(app, route, &items, Needs::PoolingModel, || Ok(()))?;
    let labels = &app.config.model.labels;
    let probs: Vec<Vec<f32>> = items.iter().map(|i| heads::class_probs(&i.prompt, labels.len())).collect();
    let pooled = run(app, route, items, trace).await?;
    let data: Vec<Value> = pooled
        .iter()
        .zip(probs)
        .enumerate()
        .map(|(index, (p, probs))| {
            // An aborted input has no logits: SGLang answers `[1.0]` and "Default".
            let (probs, label) = if p.aborted {
                (vec![1.0], "Default")
            } else {
                let label = labels.get(heads::argmax(&probs)).map_or("Default", String::as_str);
                (probs, label)
            };
            json!({ "index": index, "label": label, "num_classes": probs.len(), "probs": probs })
        })
        .collect();
    let c = &app.config;
    let model = if c.served_model_name.is_empty() { &c.model_path } else { &c.served_model_name };
    Ok(json!({
        "id": format!("classify-{}", app.new_rid()),
        "object": "list",
        "created": unix_secs(),
        "model": model,
        "data": data,
        "usage": usage(&pooled),
    }))
}

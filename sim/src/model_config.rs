//! What SGLang reads from a model directory's `config.json` and the sim reports too: the
//! context length (SGLang 0.5.23 `python/sglang/srt/utils/hf_transformers/common.py`,
//! `get_context_length`), `model_type` and `architectures` (`/model_info`). A model path with no
//! readable `config.json` (the usual `zai-org/GLM-5.2` of tests) takes the default model's
//! values from [`ModelParams`].

use std::path::Path;

use serde_json::Value;

use crate::kv_pool::ModelParams;

/// `CONTEXT_LENGTH_KEYS`, in SGLang's order.
const CONTEXT_LENGTH_KEYS: [&str; 5] =
    ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"];

/// The model facts the sim reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFacts {
    /// The context length before `--context-length`.
    pub context_length: u32,
    /// `model_type`.
    pub model_type: String,
    /// `architectures`.
    pub architectures: Vec<String>,
}

impl ModelFacts {
    /// From `<model_path>/config.json` when it can be read, else the default model's.
    pub fn of(model_path: &str, defaults: &ModelParams) -> Self {
        let fallback = Self {
            context_length: defaults.context_length,
            model_type: defaults.model_type.clone(),
            architectures: defaults.architectures.clone(),
        };
        let Ok(text) = std::fs::read_to_string(Path::new(model_path).join("config.json")) else {
            return fallback;
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(config @ Value::Object(_)) => Self::from_config(&config),
            _ => fallback,
        }
    }

    /// From a parsed Hugging Face `config.json`.
    pub fn from_config(config: &Value) -> Self {
        Self {
            context_length: context_length(config),
            model_type: config.get("model_type").and_then(Value::as_str).unwrap_or_default().to_owned(),
            architectures: config
                .get("architectures")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default(),
        }
    }
}

/// `get_context_length`: the first of [`CONTEXT_LENGTH_KEYS`] set, times the RoPE scaling factor
/// (1 when `original_max_position_embeddings` is given or the RoPE type is `llama3`); 2048 if
/// none is set.
fn context_length(config: &Value) -> u32 {
    let factor = match config.get("rope_scaling") {
        Some(Value::Object(rope)) => {
            let keeps = rope.contains_key("original_max_position_embeddings")
                || rope.get("rope_type").and_then(Value::as_str) == Some("llama3");
            if keeps { 1.0 } else { rope.get("factor").and_then(Value::as_f64).unwrap_or(1.0) }
        }
        _ => 1.0,
    };
    CONTEXT_LENGTH_KEYS
        .iter()
        .find_map(|k| config.get(*k).and_then(Value::as_f64))
        .map_or(2048, |v| (factor * v) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_config_gives_the_context_and_the_architecture() {
        let f = ModelFacts::from_config(&json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 4096,
        }));
        assert_eq!(f.context_length, 4096);
        assert_eq!(
            (f.model_type.as_str(), f.architectures.as_slice()),
            ("llama", &["LlamaForCausalLM".to_owned()][..])
        );
        let scaled =
            json!({"max_position_embeddings": 4096, "rope_scaling": {"factor": 4.0, "rope_type": "yarn"}});
        assert_eq!(context_length(&scaled), 16_384);
        let llama3 =
            json!({"max_position_embeddings": 4096, "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}});
        assert_eq!(context_length(&llama3), 4096);
        assert_eq!(context_length(&json!({"seq_length": 100, "max_position_embeddings": 4096})), 100);
        assert_eq!(context_length(&json!({})), 2048);
    }

    #[test]
    fn no_config_means_the_default_model() {
        let f = ModelFacts::of("/nonexistent/GLM-5.2", &ModelParams::default());
        assert_eq!(f.context_length, 1 << 20);
        assert_eq!(f.architectures, ["GlmMoeDsaForCausalLM"]);
    }
}

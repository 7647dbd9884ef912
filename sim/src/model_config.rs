//! What SGLang reads from a model directory's `config.json` and the sim reports too: the
//! context length (SGLang 0.5.23 `python/sglang/srt/utils/hf_transformers/common.py`,
//! `get_context_length`), `model_type` and `architectures` (`/model_info`), and what the pooling
//! routes answer with: the hidden size (an embedding's length), the classifier's labels and the
//! Matryoshka dimensions (`python/sglang/srt/configs/model_config.py`). A model path with no
//! readable `config.json` (the usual `zai-org/GLM-5.2` of tests) takes the default model's
//! values from [`ModelParams`], and [`DEFAULT_HIDDEN_SIZE`] and two labels.

use std::path::Path;

use serde_json::Value;

use crate::kv_pool::ModelParams;

/// `CONTEXT_LENGTH_KEYS`, in SGLang's order.
const CONTEXT_LENGTH_KEYS: [&str; 5] =
    ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"];

/// The hidden size when `config.json` gives none: 1024, the width of common embedding models
/// (BGE-large, Qwen3-Embedding-0.6B). An assumption, not the default GLM's (whose hidden size the
/// sim never needs otherwise): it keeps emulated embeddings small.
pub const DEFAULT_HIDDEN_SIZE: u32 = 1024;

/// Architectures SGLang serves as pooling models whatever `--is-embedding` says
/// (`is_generation_model` in python/sglang/srt/configs/model_config.py).
const POOLING_ARCHITECTURES: [&str; 19] = [
    "LlamaEmbeddingModel",
    "MistralModel",
    "LlamaForSequenceClassification",
    "LlamaForSequenceClassificationWithNormal_Weights",
    "InternLM2ForRewardModel",
    "Qwen2ForRewardModel",
    "Qwen3ForRewardModel",
    "Qwen2ForSequenceClassification",
    "Qwen3ForSequenceClassification",
    "Qwen3Model",
    "CLIPModel",
    "BertModel",
    "Contriever",
    "BertForSequenceClassification",
    "XLMRobertaModel",
    "XLMRobertaForSequenceClassification",
    "Gemma2ForSequenceClassification",
    "EmbeddingGemma2Model",
    "Lfm2BidirectionalModel",
];

/// The model facts the sim reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFacts {
    /// The context length before `--context-length`.
    pub context_length: u32,
    /// `model_type`.
    pub model_type: String,
    /// `architectures`.
    pub architectures: Vec<String>,
    /// `hidden_size`: the length of an embedding ([`DEFAULT_HIDDEN_SIZE`] when not given).
    pub hidden_size: u32,
    /// The classifier's labels by class id: `id2label`, else `LABEL_i` for `num_labels`, else
    /// transformers' default of two (`PretrainedConfig`), as `/v1/classify` names them
    /// (`_get_id2label_mapping` in python/sglang/srt/entrypoints/openai/serving_classify.py).
    pub labels: Vec<String>,
    /// Matryoshka embeddings: `dimensions` may shorten them.
    pub matryoshka: Matryoshka,
}

/// Whether a model's embeddings may be shortened, and to what (`matryoshka_dimensions`,
/// `is_matryoshka` in `config.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matryoshka {
    /// `is_matryoshka`, or a `matryoshka_dimensions` list given.
    pub supported: bool,
    /// `matryoshka_dimensions` (empty: any length up to the hidden size).
    pub dimensions: Vec<u32>,
}

impl ModelFacts {
    /// Whether SGLang would serve this architecture as a pooling model even without
    /// `--is-embedding`.
    pub fn pooling_architecture(&self) -> bool {
        self.architectures.iter().any(|a| POOLING_ARCHITECTURES.contains(&a.as_str()))
    }
}

impl ModelFacts {
    /// From `<model_path>/config.json` when it can be read, else the default model's.
    pub fn of(model_path: &str, defaults: &ModelParams) -> Self {
        let fallback = Self {
            context_length: defaults.context_length,
            model_type: defaults.model_type.clone(),
            architectures: defaults.architectures.clone(),
            hidden_size: DEFAULT_HIDDEN_SIZE,
            labels: default_labels(2),
            matryoshka: Matryoshka::default(),
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
            hidden_size: config
                .get("hidden_size")
                .and_then(Value::as_u64)
                .and_then(|h| u32::try_from(h).ok())
                .filter(|&h| h > 0)
                .unwrap_or(DEFAULT_HIDDEN_SIZE),
            labels: labels(config),
            matryoshka: matryoshka(config),
        }
    }
}

/// `LABEL_0` … `LABEL_{n-1}`.
fn default_labels(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("LABEL_{i}")).collect()
}

/// `id2label` in class order (its keys are the ids, as strings in JSON), else `num_labels`
/// default names, else two.
fn labels(config: &Value) -> Vec<String> {
    if let Some(Value::Object(map)) = config.get("id2label") {
        let mut named: Vec<(u64, String)> = map
            .iter()
            .filter_map(|(id, label)| Some((id.parse().ok()?, label.as_str()?.to_owned())))
            .collect();
        named.sort();
        if !named.is_empty() {
            return named.into_iter().map(|(_, label)| label).collect();
        }
    }
    let n = config.get("num_labels").and_then(Value::as_u64).filter(|&n| n > 0).unwrap_or(2);
    default_labels(n as usize)
}

/// `matryoshka_dimensions` and `is_matryoshka`.
fn matryoshka(config: &Value) -> Matryoshka {
    let dimensions: Vec<u32> = config
        .get("matryoshka_dimensions")
        .and_then(Value::as_array)
        .map(|d| d.iter().filter_map(Value::as_u64).filter_map(|d| u32::try_from(d).ok()).collect())
        .unwrap_or_default();
    let flag = config.get("is_matryoshka").and_then(Value::as_bool).unwrap_or(false);
    Matryoshka { supported: flag || !dimensions.is_empty(), dimensions }
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
        assert_eq!(f.hidden_size, DEFAULT_HIDDEN_SIZE);
        assert_eq!(f.labels, ["LABEL_0", "LABEL_1"]);
        assert!(!f.matryoshka.supported && !f.pooling_architecture());
    }

    #[test]
    fn a_config_gives_the_pooling_facts() {
        let f = ModelFacts::from_config(&json!({
            "architectures": ["Qwen3ForSequenceClassification"], "hidden_size": 64,
            "id2label": {"1": "yes", "0": "no", "2": "maybe"}, "matryoshka_dimensions": [16, 32],
        }));
        assert_eq!(f.hidden_size, 64);
        assert_eq!(f.labels, ["no", "yes", "maybe"]);
        assert_eq!(f.matryoshka, Matryoshka { supported: true, dimensions: vec![16, 32] });
        assert!(f.pooling_architecture());
        let three = ModelFacts::from_config(&json!({"num_labels": 3, "is_matryoshka": true}));
        assert_eq!(three.labels, ["LABEL_0", "LABEL_1", "LABEL_2"]);
        assert!(three.matryoshka.supported && three.matryoshka.dimensions.is_empty());
        assert_eq!(three.hidden_size, DEFAULT_HIDDEN_SIZE);
    }
}

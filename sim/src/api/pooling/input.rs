//! The `input` and `rid` of `/v1/embeddings` and `/v1/classify` as SGLang 0.5.23 reads them:
//! the pydantic unions `EmbeddingInput` and `ClassifyInput` (python/sglang/srt/entrypoints/openai/
//! protocol.py), the handlers' `_validate_request` (serving_embedding.py, serving_classify.py),
//! and `EmbeddingReqInput.normalize_batch_and_arguments` for the rids
//! (python/sglang/srt/managers/io_struct.py).

use serde::Deserialize;
use serde_json::Value;

use super::Item;
use crate::api::input::prompt;
use crate::api::input::{InputError, field};
use crate::error::ApiError;

/// An `input`, in the order pydantic tries the union's members.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub(super) enum Input {
    /// `List[int]`: one prompt of token ids (an empty list lands here).
    Ids(Vec<i64>),
    /// `List[List[int]]`: a batch of token-id prompts.
    IdBatch(Vec<Vec<i64>>),
    /// `str`: one text prompt.
    Text(String),
    /// `List[str]`: a batch of text prompts.
    Texts(Vec<String>),
    /// `List[MultimodalEmbeddingInput]` (embeddings only): the text of each item is its prompt.
    Multimodal(Vec<MultimodalItem>),
}

/// One `MultimodalEmbeddingInput`; the sim reads its text only.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(super) struct MultimodalItem {
    /// `text`.
    #[serde(default)]
    text: Option<String>,
}

/// A `rid`: one, or one per input.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum Rid {
    One(String),
    Many(Vec<String>),
}

impl Input {
    /// The body's `input`; `classify` refuses what `ClassifyInput` does not take (lists of token
    /// lists, multimodal items) as FastAPI would.
    pub(super) fn of(body: &Value, classify: bool) -> Result<Self, InputError> {
        let input = field::<Input>(body, "input")?.ok_or(InputError::NoPrompt("input: Field required"))?;
        if classify && matches!(input, Input::IdBatch(_) | Input::Multimodal(_)) {
            let source = <serde_json::Error as serde::de::Error>::custom(
                "Input should be a valid string, a list of strings or a list of integers",
            );
            return Err(InputError::Field { key: "input", source });
        }
        Ok(input)
    }

    /// `_validate_request`'s verdict, in SGLang's words.
    pub(super) fn refusal(&self) -> Option<String> {
        let blank = |s: &str| s.trim().is_empty();
        match self {
            Input::Text(s) if s.is_empty() => Some("Input cannot be empty".into()),
            Input::Text(s) if blank(s) => Some("Input cannot be empty or whitespace only".into()),
            Input::Ids(ids) if ids.is_empty() => Some("Input cannot be empty".into()),
            Input::Ids(ids) => {
                ids.iter().position(|&t| t < 0).map(|i| format!("Token ID at index {i} must be non-negative"))
            }
            Input::Texts(texts) => texts
                .iter()
                .position(|s| blank(s))
                .map(|i| format!("Input at index {i} cannot be empty or whitespace only")),
            Input::Text(_) | Input::IdBatch(_) | Input::Multimodal(_) => None,
        }
    }

    /// Whether SGLang serves it as one request rather than a batch: a string, a token list, or
    /// a single multimodal item.
    pub(super) fn single(&self) -> bool {
        match self {
            Input::Text(_) | Input::Ids(_) => true,
            Input::Multimodal(items) => items.len() == 1,
            Input::IdBatch(_) | Input::Texts(_) => false,
        }
    }

    /// The prompts, tokenized as a `/v1/completions` prompt is; a multimodal item without text
    /// is SGLang's `"padding"` (no chat template is applied).
    pub(super) fn prompts(
        &self,
        tokenizer: Option<&infera_tokenize::Tokenizer>,
    ) -> Result<Vec<Vec<u32>>, InputError> {
        let ids = |ids: &[i64]| ids.iter().map(|&t| u32::try_from(t).unwrap_or(u32::MAX)).collect();
        match self {
            Input::Ids(v) => Ok(vec![ids(v)]),
            Input::IdBatch(vs) => Ok(vs.iter().map(|v| ids(v)).collect()),
            Input::Text(s) => Ok(vec![prompt::of_text(s, tokenizer)?]),
            Input::Texts(ss) => ss.iter().map(|s| prompt::of_text(s, tokenizer)).collect(),
            Input::Multimodal(items) => items
                .iter()
                .map(|m| prompt::of_text(m.text.as_deref().unwrap_or("padding"), tokenizer))
                .collect(),
        }
    }
}

/// The inputs of `body` with their rids, as SGLang normalises them: a single input takes a
/// string `rid`; a batch takes one per input (a string is SGLang's `AssertionError`, a 500;
/// duplicates its `ValueError`, a 400).
pub(super) fn items(body: &Value, input: &Input, prompts: Vec<Vec<u32>>) -> Result<Vec<Item>, ApiError> {
    let rid = field::<Rid>(body, "rid").map_err(ApiError::Input)?;
    let rids: Vec<Option<String>> = match (rid, input.single()) {
        (None, _) => vec![None; prompts.len()],
        (Some(Rid::One(rid)), true) => vec![Some(rid)],
        // A list is no key of the tokenizer manager's `rid_to_state`.
        (Some(Rid::Many(_)), true) => return Err(ApiError::Internal("unhashable type: 'list'".into())),
        (Some(Rid::One(_)), false) => return Err(ApiError::Internal("The rid should be a list.".into())),
        (Some(Rid::Many(rids)), false) => {
            let mut duplicates: Vec<&String> = Vec::new();
            for (i, rid) in rids.iter().enumerate() {
                if rids[..i].contains(rid) && !duplicates.contains(&rid) {
                    duplicates.push(rid);
                }
            }
            if !duplicates.is_empty() {
                let listed: Vec<String> = duplicates.iter().map(|r| format!("'{r}'")).collect();
                let message =
                    format!("Duplicate request IDs detected within the request: [{}]", listed.join(", "));
                return Err(ApiError::Input(InputError::Invalid(message)));
            }
            if rids.len() < prompts.len() {
                return Err(ApiError::Internal("list index out of range".into()));
            }
            rids.into_iter().map(Some).collect()
        }
    };
    Ok(prompts.into_iter().zip(rids).map(|(prompt, rid)| Item { prompt, rid }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: Value) -> Input {
        Input::of(&json!({ "input": v }), false).unwrap()
    }

    #[test]
    fn the_union_reads_each_shape() {
        assert_eq!(input(json!("a")), Input::Text("a".into()));
        assert_eq!(input(json!([1, 2])), Input::Ids(vec![1, 2]));
        assert_eq!(input(json!([[1], [2, 3]])), Input::IdBatch(vec![vec![1], vec![2, 3]]));
        assert_eq!(input(json!(["a", "b"])), Input::Texts(vec!["a".into(), "b".into()]));
        assert!(matches!(input(json!([{"text": "a"}])), Input::Multimodal(_)));
        assert!(matches!(Input::of(&json!({"input": ["a", 1]}), false), Err(InputError::Field { .. })));
        assert!(matches!(Input::of(&json!({"input": [[1]]}), true), Err(InputError::Field { .. })));
        assert!(matches!(Input::of(&json!({}), false), Err(InputError::NoPrompt(_))));
    }

    #[test]
    fn refusals_are_sglangs() {
        assert_eq!(input(json!("")).refusal().as_deref(), Some("Input cannot be empty"));
        assert_eq!(input(json!(" ")).refusal().as_deref(), Some("Input cannot be empty or whitespace only"));
        assert_eq!(input(json!([])).refusal().as_deref(), Some("Input cannot be empty"));
        assert_eq!(
            input(json!([3, -1])).refusal().as_deref(),
            Some("Token ID at index 1 must be non-negative")
        );
        assert_eq!(
            input(json!(["a", "\n"])).refusal().as_deref(),
            Some("Input at index 1 cannot be empty or whitespace only")
        );
        assert_eq!(input(json!(["a"])).refusal(), None);
    }

    #[test]
    fn rids_follow_the_batch() {
        let batch = input(json!(["a", "b"]));
        let prompts = || vec![vec![1], vec![2]];
        let ok = items(&json!({"rid": ["x", "y"]}), &batch, prompts()).unwrap();
        assert_eq!(ok.iter().map(|i| i.rid.as_deref()).collect::<Vec<_>>(), [Some("x"), Some("y")]);
        let dup = items(&json!({"rid": ["x", "x"]}), &batch, prompts()).unwrap_err();
        assert_eq!(dup.to_string(), "Duplicate request IDs detected within the request: ['x']");
        assert_eq!(dup.status(), 400);
        let one = items(&json!({"rid": "x"}), &batch, prompts()).unwrap_err();
        assert_eq!(
            (one.status().as_u16(), one.to_string()),
            (500, "Internal server error: The rid should be a list.".into())
        );
        let single = items(&json!({"rid": "x"}), &input(json!("a")), vec![vec![1]]).unwrap();
        assert_eq!(single[0].rid.as_deref(), Some("x"));
        assert!(items(&json!({}), &batch, prompts()).unwrap().iter().all(|i| i.rid.is_none()));
    }
}

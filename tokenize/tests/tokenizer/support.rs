//! Fixtures shared by the tests: the trained tokenizers are made once per test binary.

use std::sync::OnceLock;

use infera_tokenize::{SpecialTokens, Tokenizer, fixture};
use serde_json::{Map, Value};

/// The byte-level BPE (trained once).
pub(crate) fn byte_level() -> tokenizers::Tokenizer {
    static T: OnceLock<tokenizers::Tokenizer> = OnceLock::new();
    T.get_or_init(|| fixture::byte_level_bpe(800)).clone()
}

/// The Metaspace (`prepend_scheme: first`) BPE (trained once).
pub(crate) fn metaspace() -> tokenizers::Tokenizer {
    static T: OnceLock<tokenizers::Tokenizer> = OnceLock::new();
    T.get_or_init(|| fixture::metaspace_bpe(800)).clone()
}

/// `bos_token` as the fixtures' templates print it.
pub(crate) fn special() -> SpecialTokens {
    SpecialTokens {
        bos: Some("<|endoftext|>".into()),
        eos: Some("<|im_end|>".into()),
        ..SpecialTokens::default()
    }
}

/// The byte-level tokenizer with `template` and a session cache.
pub(crate) fn with_template(template: &str) -> Tokenizer {
    Tokenizer::new(byte_level(), Some(template), special()).unwrap().with_session_cache(64 << 20)
}

/// A JSON object literal as a body.
pub(crate) fn body(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

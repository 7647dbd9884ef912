//! The tokenizer the accepted bodies go through.

use std::sync::OnceLock;

use infera_tokenize::{Tokenizer, fixture};
use serde_json::{Map, Value, json};

/// A byte-level BPE without merges (GPT-2's byte alphabet, the ChatML specials) and the ChatML
/// template, loaded as `--tokenizer` loads one, with a session cache (untrained: built at once).
pub(crate) fn tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let mut extra = 0;
        let vocab: Map<String, Value> = (0u32..256)
            .map(|b| {
                let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
                let c = if printable {
                    b
                } else {
                    extra += 1;
                    255 + extra
                };
                (char::from_u32(c).expect("a char").to_string(), json!(b))
            })
            .collect();
        let special = |id: u32, content: &str| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": true})
        };
        let byte_level =
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
        let model = json!({"type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []});
        let file = json!({"version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [special(256, "<|im_start|>"), special(257, "<|im_end|>")], "normalizer": null,
            "pre_tokenizer": byte_level, "post_processor": null, "decoder": byte_level, "model": model});
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, file.to_string()).expect("written");
        let config = json!({"chat_template": fixture::CHATML, "eos_token": "<|im_end|>"});
        std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).expect("written");
        Tokenizer::load(&path, None).expect("the tokenizer loads").with_session_cache(1 << 20)
    })
}

//! The fast encoder on real model tokenizers, judged by `tokenizers`: DeepSeek V3's
//! `tokenizer.json` (128 k vocabulary, byte-level) and Anthropic's (NFKC normalizer), as the PyPI
//! `litellm` wheel ships them. `cargo xtask setup` takes them out of the wheel into
//! `.venv/model-tokenizers` (`INFERA_MODEL_TOKENIZERS` says where, as `cargo xtask test` sets it).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use infera_proto::types::Api;
use infera_tokenize::{CacheUse, EncoderChoice, EncoderKind, Outcome, SpecialTokens, Tokenizer, fixture};
use serde_json::{Value, json};

/// Bytes per prompt-sized piece of the corpus.
const PIECE: usize = 8192;

fn model(file: &str) -> PathBuf {
    let dir = std::env::var_os("INFERA_MODEL_TOKENIZERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/model-tokenizers"));
    let path = dir.join(file);
    assert!(path.is_file(), "{} is missing: run `cargo xtask setup`", path.display());
    path
}

fn reference(file: &str) -> tokenizers::Tokenizer {
    tokenizers::Tokenizer::from_file(model(file)).unwrap()
}

/// This repository's manual, cut into pieces of about [`PIECE`] bytes on character boundaries.
fn corpus() -> &'static [String] {
    static PIECES: OnceLock<Vec<String>> = OnceLock::new();
    PIECES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manual");
        let mut files = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() { dirs.push(path) } else { files.push(path) }
            }
        }
        files.sort();
        let text: String = files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
        let mut pieces = Vec::new();
        let mut start = 0;
        while start < text.len() && pieces.len() < 40 {
            let mut end = (start + PIECE).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            pieces.push(text[start..end].to_owned());
            start = end;
        }
        pieces
    })
}

/// The corpus alone, then with the tokenizer's added tokens between pieces.
fn assert_same_ids(file: &str, t: &Tokenizer) {
    let reference = reference(file);
    let mut added: Vec<(u32, String)> =
        reference.get_added_tokens_decoder().into_iter().map(|(id, t)| (id, t.content)).collect();
    added.sort();
    assert!(!added.is_empty(), "{file} has added tokens");
    let mut compared = 0;
    for (i, piece) in corpus().iter().enumerate() {
        let with_added = format!("{piece}{}{piece}", added[i * 37 % added.len()].1);
        for text in [piece.as_str(), &with_added] {
            for add in [false, true] {
                let want = reference.encode(text, add).unwrap().get_ids().to_vec();
                let got = t.encode(text, add).unwrap();
                assert!(got == want, "{file}: different ids on piece {i} (add_special_tokens={add})");
                compared += want.len();
            }
        }
    }
    assert!(compared > 100_000, "{compared} tokens compared");
}

#[test]
fn deepseek_v3_encodes_fast_with_identical_ids() {
    let t = Tokenizer::load(&model("deepseek_tokenizer.json"), None).unwrap();
    assert_eq!(t.encoder(), EncoderKind::Fast { offsets_from_bytes: true });
    assert_same_ids("deepseek_tokenizer.json", &t);
}

#[test]
fn anthropics_tokenizer_encodes_fast_with_identical_ids() {
    let t = Tokenizer::load(&model("anthropic_tokenizer.json"), None).unwrap();
    // NFKC changes some texts (ligatures, full-width letters): those take their offsets from the
    // reference, the others from the token bytes.
    assert_eq!(t.encoder(), EncoderKind::Fast { offsets_from_bytes: true });
    assert_same_ids("anthropic_tokenizer.json", &t);
}

/// DeepSeek V3's turn layout (its template without tools): the end-of-sentence token closes
/// each answer, and is where the session cache may cut.
const DEEPSEEK_CHAT: &str = "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\
{% elif m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}{% else %}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}\
{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}";

/// The same layout on Anthropic's tokenizer's own special tokens.
const ANTHROPIC_CHAT: &str = "{{ bos_token }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] }}\
{% if m['role'] == 'assistant' %}{{ '<EOT>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}";

fn tokens(t: &Tokenizer, messages: &[Value], session: Option<&str>) -> infera_tokenize::Tokens {
    let body = fixture::chat_body(messages);
    match t.tokenize(Api::ChatCompletions, &body, session).unwrap() {
        Outcome::Tokens(tokens) => tokens,
        other => panic!("{other:?}"),
    }
}

/// Multi-turn sessions through the fast encoder's session cache equal whole encodings by the
/// reference. Some answers have text NFKC changes (their offsets then come from the reference).
fn session_turns_equal_whole_reference_encodings(file: &str, template: &str, bos: &str) {
    let special = || SpecialTokens { bos: Some(bos.into()), ..SpecialTokens::default() };
    let cached =
        Tokenizer::new(reference(file), Some(template), special()).unwrap().with_session_cache(64 << 20);
    assert_eq!(cached.encoder(), EncoderKind::Fast { offsets_from_bytes: true });
    let fresh = Tokenizer::new(reference(file), Some(template), special())
        .unwrap()
        .with_encoder(EncoderChoice::Reference);
    let mut hits = 0;
    for seed in 0..3u64 {
        let mut messages = fixture::conversation(seed, 1, 120, true);
        let session = seed.to_string();
        for turn in 0..4 {
            let got = tokens(&cached, &messages, Some(session.as_str()));
            assert_eq!(got.ids, tokens(&fresh, &messages, None).ids, "{file}: session {seed}, turn {turn}");
            hits += usize::from(matches!(got.cache, CacheUse::Hit(n) if n > 0));
            let answer = if turn % 2 == 0 { "深度求索 👍" } else { "ﬁne ｆｕｌｌ ½" };
            messages.push(json!({"role": "assistant", "content": format!("answer {turn}: {answer}")}));
            messages.push(
                json!({"role": "user", "content": fixture::text(&mut fixture::Lcg::new(seed + turn), 60)}),
            );
        }
    }
    // A turn can reuse up to the previous prompt's last answer, closed by the end-of-turn token:
    // the second turn's previous prompt has none yet, the third and fourth reuse.
    assert_eq!(hits, 3 * 2, "{file}: the third and fourth turn of each session reuse its prefix");
}

#[test]
fn deepseek_v3_session_turns_equal_whole_reference_encodings() {
    session_turns_equal_whole_reference_encodings(
        "deepseek_tokenizer.json",
        DEEPSEEK_CHAT,
        "<｜begin▁of▁sentence｜>",
    );
}

#[test]
fn anthropic_session_turns_equal_whole_reference_encodings() {
    session_turns_equal_whole_reference_encodings("anthropic_tokenizer.json", ANTHROPIC_CHAT, "<SOS>");
}

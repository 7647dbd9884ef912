//! The fast encoder against the reference (`tokenizers` itself) on the fixtures: the same ids
//! with and without the post-processor's tokens, the session cache's cuts from token bytes, and
//! the reference kept (with its reason) where the fast one is not proven.

use infera_proto::types::Api;
use infera_tokenize::{CacheUse, EncoderChoice, EncoderKind, Outcome, SpecialTokens, Tokenizer, fixture};
use serde_json::json;

use crate::support::{body, byte_level, metaspace, special};

/// Prompt-sized texts: the fixture's prose, glued to the ChatML tokens and their pieces.
fn texts() -> Vec<String> {
    let mut rng = fixture::Lcg::new(11);
    let glue =
        ["", "<|im_start|>", "<|im_end|>\n", "<|im_endless", " <|im_", "<|endoftext|><|endoftext|>", "  "];
    (0..120)
        .map(|i| format!("{}{}{}", fixture::text(&mut rng, 5 + i * 3), glue[i % glue.len()], "é漢👍"))
        .collect()
}

fn assert_same_ids(tokenizer: &Tokenizer, reference: &tokenizers::Tokenizer) {
    for text in texts() {
        for add in [false, true] {
            let want = reference.encode(text.as_str(), add).unwrap().get_ids().to_vec();
            assert_eq!(tokenizer.encode(&text, add).unwrap(), want, "add_special_tokens={add} on {text:?}");
        }
    }
}

#[test]
fn the_byte_level_fixture_encodes_fast_with_offsets_from_its_bytes() {
    let t = Tokenizer::new(byte_level(), None, special()).unwrap();
    assert_eq!(t.encoder(), &EncoderKind::Fast { offsets_from_bytes: true });
    assert_same_ids(&t, &byte_level());
}

#[test]
fn a_template_post_processor_puts_its_tokens_around_the_fast_ids() {
    // As Llama's tokenizer.json: `<bos> $A` for one sequence, plus an end token.
    let mut reference = byte_level();
    let bos = reference.token_to_id("<|endoftext|>").unwrap();
    let eos = reference.token_to_id("<|im_end|>").unwrap();
    let processor = tokenizers::processors::template::TemplateProcessing::builder()
        .try_single("<|endoftext|> $A <|im_end|>")
        .unwrap()
        .special_tokens(vec![("<|endoftext|>", bos), ("<|im_end|>", eos)])
        .build()
        .unwrap();
    reference.with_post_processor(Some(processor));
    let t = Tokenizer::new(reference.clone(), None, special()).unwrap();
    assert!(matches!(t.encoder(), EncoderKind::Fast { .. }), "{:?}", t.encoder());
    let ids = t.encode("hello", true).unwrap();
    assert_eq!((ids.first(), ids.last()), (Some(&bos), Some(&eos)));
    assert_same_ids(&t, &reference);
    // A completion's text gets them too, as SGLang's `encode(prompt)`.
    let got = t.tokenize(Api::Completions, &body(json!({"model": "m", "prompt": "one two"})), None).unwrap();
    let Outcome::Tokens(tokens) = got else { panic!("{got:?}") };
    assert_eq!(&*tokens.ids, reference.encode("one two", true).unwrap().get_ids());
}

#[test]
fn the_reference_runs_when_asked_for_or_when_specials_are_encoded_as_text() {
    let t = Tokenizer::new(byte_level(), None, special()).unwrap().with_encoder(EncoderChoice::Reference);
    assert_eq!(t.encoder(), &EncoderKind::Reference("asked for".into()));
    assert_same_ids(&t, &byte_level());

    let mut split = byte_level();
    split.set_encode_special_tokens(true);
    let t = Tokenizer::new(split.clone(), None, special()).unwrap();
    let EncoderKind::Reference(reason) = t.encoder() else { panic!("{:?}", t.encoder()) };
    assert!(reason.contains("encode_special_tokens"), "{reason}");
    assert_same_ids(&t, &split);
    // And back: the same tokenizer can switch to the fast encoder when it is proven.
    let t = Tokenizer::new(byte_level(), None, special()).unwrap().with_encoder(EncoderChoice::Auto);
    assert!(matches!(t.encoder(), EncoderKind::Fast { .. }));
}

#[test]
fn a_disagreement_on_the_probe_keeps_the_reference() {
    // The Metaspace fixture's vocabulary has no capital letters and no unknown token:
    // `tokenizers` drops such a character before the merges (the "▁" and "h" of "▁The" merge),
    // kitoken does not.
    let t = Tokenizer::new(metaspace(), None, SpecialTokens::default()).unwrap();
    let EncoderKind::Reference(reason) = t.encoder() else { panic!("{:?}", t.encoder()) };
    assert!(reason.starts_with("kitoken's ids differ from tokenizers' on \"The quick"), "{reason}");
    assert_same_ids(&t, &metaspace());
}

#[test]
fn a_prefix_space_takes_the_session_offsets_from_the_reference() {
    // With `add_prefix_space` the first token carries a space the text does not have, so the
    // token bytes never tile the text; the session cache's offsets then come from `tokenizers`.
    let mut reference = byte_level();
    reference
        .with_pre_tokenizer(Some(tokenizers::pre_tokenizers::byte_level::ByteLevel::new(true, true, true)));
    let cached = Tokenizer::new(reference.clone(), Some(fixture::CHATML), special())
        .unwrap()
        .with_session_cache(1 << 20);
    assert_eq!(cached.encoder(), &EncoderKind::Fast { offsets_from_bytes: false });
    assert_same_ids(&cached, &reference);
    let fresh = Tokenizer::new(reference, Some(fixture::CHATML), special())
        .unwrap()
        .with_encoder(EncoderChoice::Reference);
    let mut messages = fixture::conversation(5, 1, 40, true);
    let mut hits = 0;
    for turn in 0..4 {
        let chat = fixture::chat_body(&messages);
        let (Outcome::Tokens(got), Outcome::Tokens(want)) = (
            cached.tokenize(Api::ChatCompletions, &chat, Some("s")).unwrap(),
            fresh.tokenize(Api::ChatCompletions, &chat, None).unwrap(),
        ) else {
            panic!("no tokens")
        };
        assert_eq!(got.ids, want.ids, "turn {turn}");
        hits += usize::from(matches!(got.cache, CacheUse::Hit(_)));
        messages.push(json!({"role": "assistant", "content": format!("answer {turn}")}));
        messages.push(json!({"role": "user", "content": format!("question {turn}")}));
    }
    assert_eq!(hits, 3, "every turn after the first reuses the previous prompt");
}

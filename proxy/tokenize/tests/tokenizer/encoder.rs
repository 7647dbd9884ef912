//! The fast encoder against the reference (`tokenizers` itself) on the fixtures: the same ids
//! with and without the post-processor's tokens, the session cache's cuts from token bytes, and
//! the reference kept (with its reason) where the fast one is not proven.

use infera_proto::types::Api;
use infera_tokenize::{
    CacheUse, EncoderChoice, EncoderKind, Outcome, SpecialTokens, Tokenizer, Verdict, fixture,
};
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
    assert_eq!(t.encoder(), EncoderKind::Fast { offsets_from_bytes: true });
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
    assert_eq!(t.encoder(), EncoderKind::Reference("asked for".into()));
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
    assert_eq!(cached.encoder(), EncoderKind::Fast { offsets_from_bytes: false });
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

#[test]
fn a_run_time_check_that_finds_other_ids_turns_the_fast_encoder_off() {
    // The Metaspace fixture fails the probe at load (capital letters, above); without the probe
    // the fast encoder runs, and the run-time check has to catch it.
    let reference = metaspace();
    let t = Tokenizer::new(reference.clone(), Some(fixture::CHATML), SpecialTokens::default())
        .unwrap()
        .with_encoder(EncoderChoice::FastWithoutProbe)
        .with_checks(2);
    assert_eq!(t.encoder(), EncoderKind::Fast { offsets_from_bytes: false });
    // The first prompt is due, then one in two.
    assert!(t.check_due() && !t.check_due() && t.check_due());
    let tokenize =
        |b: &serde_json::Map<String, serde_json::Value>| match t.tokenize(Api::Completions, b, None) {
            Ok(Outcome::Tokens(tokens)) => tokens.ids,
            other => panic!("{other:?}"),
        };

    let agreed = body(json!({"model": "m", "prompt": "hello world, one pick per page"}));
    let ids = tokenize(&agreed);
    assert_eq!(t.check(Api::Completions, &agreed, &ids).unwrap(), Verdict::Same);
    let given = body(json!({"model": "m", "prompt": [1, 2, 3]}));
    assert_eq!(t.check(Api::Completions, &given, &[1, 2, 3]).unwrap(), Verdict::NotEncoded);

    let capitals = body(json!({"model": "m", "prompt": "The Quick brown fox"}));
    let wrong = tokenize(&capitals);
    let right = reference.encode("The Quick brown fox", true).unwrap().get_ids().to_vec();
    assert_ne!(&*wrong, right.as_slice(), "the fast encoder is wrong on this prompt");
    let Verdict::Different(reason) = t.check(Api::Completions, &capitals, &wrong).unwrap() else {
        panic!("the check missed it")
    };
    assert!(reason.contains("from token 0") && reason.contains("The Quick"), "{reason}");
    // Off for good: the reference encodes, and nothing more is due.
    assert_eq!(t.encoder(), EncoderKind::Reference(reason));
    assert_eq!(&*tokenize(&capitals), right.as_slice());
    assert!(!t.check_due());
}

#[test]
fn a_checked_session_turn_is_the_whole_reference_encoding() {
    let t = crate::support::with_template(fixture::CHATML).with_checks(1);
    let mut messages = fixture::conversation(9, 1, 50, true);
    for turn in 0..3 {
        let chat = fixture::chat_body(&messages);
        let Outcome::Tokens(tokens) = t.tokenize(Api::ChatCompletions, &chat, Some("s")).unwrap() else {
            panic!("no tokens")
        };
        assert!(t.check_due());
        assert_eq!(t.check(Api::ChatCompletions, &chat, &tokens.ids).unwrap(), Verdict::Same, "turn {turn}");
        messages.push(json!({"role": "assistant", "content": format!("answer {turn} <|im_end|> inside")}));
        messages.push(json!({"role": "user", "content": "next"}));
    }
    assert!(matches!(t.encoder(), EncoderKind::Fast { .. }));
}

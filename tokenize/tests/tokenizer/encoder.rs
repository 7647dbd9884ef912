//! The fast encoder against the reference (`tokenizers` itself) on the fixtures: the same ids
//! with and without the post-processor's tokens, the session cache's cuts from token bytes, and
//! the reference kept (with its reason) where the fast one is not proven.

use infera_proto::types::Api;
use infera_tokenize::{
    CacheUse, EncoderChoice, EncoderKind, Outcome, ReferenceReason, SpecialTokens, Tokenizer, Verdict,
    fixture,
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
    assert_eq!(t.encoder(), EncoderKind::Reference(ReferenceReason::AskedFor));
    assert_same_ids(&t, &byte_level());
    // And back: the same tokenizer switches to the fast encoder, which is proven at load.
    let t = t.with_encoder(EncoderChoice::Auto);
    assert!(matches!(t.encoder(), EncoderKind::Fast { .. }), "{:?}", t.encoder());

    let mut split = byte_level();
    split.set_encode_special_tokens(true);
    let t = Tokenizer::new(split.clone(), None, special()).unwrap();
    assert_eq!(t.encoder(), EncoderKind::Reference(ReferenceReason::SpecialsAsText));
    assert_same_ids(&t, &split);
}

#[test]
fn models_kitoken_would_run_otherwise_keep_the_reference() {
    let unsupported = |t: &Tokenizer| match t.encoder() {
        EncoderKind::Reference(ReferenceReason::Unsupported(why)) => why,
        other => panic!("{other:?}"),
    };
    // A WordPiece model (not a BPE).
    let wordpiece = json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}});
    let t = Tokenizer::new(wordpiece.to_string().parse().unwrap(), None, SpecialTokens::default()).unwrap();
    assert!(unsupported(&t).contains("not BPE"), "{}", unsupported(&t));
    // A BPE with dropout.
    let json = byte_level().to_string(false).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["model"]["dropout"] = json!(0.1);
    let t = Tokenizer::new(v.to_string().parse().unwrap(), None, special()).unwrap();
    assert_eq!(unsupported(&t), "the BPE has dropout");
    // A vocabulary token the merges do not make: kitoken would take it whole, tokenizers not.
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["model"]["vocab"]["qzx"] = json!(100_000);
    let t = Tokenizer::new(v.to_string().parse().unwrap(), None, special()).unwrap();
    assert!(unsupported(&t).contains("\"qzx\""), "{}", unsupported(&t));
}

#[test]
fn a_disagreement_on_the_probe_keeps_the_reference() {
    // The Metaspace fixture's vocabulary has no capital letters and no unknown token:
    // `tokenizers` drops such a character before the merges (the "▁" and "h" of "▁The" merge),
    // kitoken does not.
    let t = Tokenizer::new(metaspace(), None, SpecialTokens::default()).unwrap();
    let EncoderKind::Reference(ReferenceReason::ProbeDiffers { excerpt }) = t.encoder() else {
        panic!("{:?}", t.encoder())
    };
    assert!(excerpt.starts_with("The quick"), "{excerpt}");
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
    // The Metaspace fixture fails the probe at load (capital letters at the start of a text,
    // above); without the probe the fast encoder runs, and the run-time check has to catch it.
    // The template gives the contents alone, each closed by an added token, so that a prompt
    // starts with the user's text and the session cache can cut after it.
    let reference = metaspace();
    let template = "{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}";
    let t = Tokenizer::new(reference.clone(), Some(template), SpecialTokens::default())
        .unwrap()
        .with_encoder(EncoderChoice::FastWithoutProbe)
        .with_session_cache(1 << 20)
        .with_checks(2);
    assert_eq!(t.encoder(), EncoderKind::Fast { offsets_from_bytes: false });
    // The first prompt is due, then one in two.
    assert!(t.check_due() && !t.check_due() && t.check_due());
    let chat = |texts: &[&str]| {
        let messages: Vec<_> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": text}))
            .collect();
        fixture::chat_body(&messages)
    };
    let tokens = |b: &serde_json::Map<String, serde_json::Value>, session| match t.tokenize(
        Api::ChatCompletions,
        b,
        session,
    ) {
        Ok(Outcome::Tokens(tokens)) => tokens,
        other => panic!("{other:?}"),
    };
    let reference_ids = |b: &serde_json::Map<String, serde_json::Value>| {
        let Ok(infera_tokenize::Rendered::Chat { text, .. }) = t.render(Api::ChatCompletions, b) else {
            panic!()
        };
        reference.encode(text.as_str(), false).unwrap().get_ids().to_vec()
    };

    // A session's first turn, which the check finds right.
    let first = chat(&["hello world, one pick per page"]);
    let got = tokens(&first, Some("s"));
    assert_eq!(t.check(Api::ChatCompletions, &first, &got.ids).unwrap(), Verdict::Same);
    let given = body(json!({"model": "m", "prompt": [1, 2, 3]}));
    assert_eq!(t.check(Api::Completions, &given, &[1, 2, 3]).unwrap(), Verdict::NotEncoded);

    // Capital letters at the start: the fast ids are wrong, and the check sees it.
    let capitals = chat(&["The Quick brown fox"]);
    let wrong = tokens(&capitals, None);
    assert_ne!(&*wrong.ids, reference_ids(&capitals).as_slice(), "the fast encoder is wrong on this prompt");
    let Verdict::EncoderDiffers(reason) = t.check(Api::ChatCompletions, &capitals, &wrong.ids).unwrap()
    else {
        panic!("the check missed it")
    };
    let ReferenceReason::RunTimeDiffers { at: 0, excerpt } = &reason else { panic!("{reason:?}") };
    assert!(excerpt.starts_with("The Quick"), "{excerpt}");
    // Off for good: the reference encodes, nothing more is due, and what the session cache
    // holds from before is not lent out again.
    assert_eq!(t.encoder(), EncoderKind::Reference(reason));
    assert!(!t.check_due());
    assert_eq!(&*tokens(&capitals, None).ids, reference_ids(&capitals).as_slice());
    let next = chat(&["hello world, one pick per page", "An answer", "next"]);
    let turn = tokens(&next, Some("s"));
    assert_eq!(turn.cache, CacheUse::Miss, "the entry from before the check is not reused");
    assert_eq!(&*turn.ids, reference_ids(&next).as_slice());
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
    // Ids that are not the prompt's (as a faulty cache would lend): the encoder is right, so the
    // cache is blamed, its entries are not lent again, and the fast encoder stays.
    let chat = fixture::chat_body(&messages);
    let Outcome::Tokens(tokens) = t.tokenize(Api::ChatCompletions, &chat, Some("s")).unwrap() else {
        panic!()
    };
    assert!(matches!(tokens.cache, CacheUse::Hit(_)));
    let mut bad = tokens.ids.to_vec();
    bad.swap(1, 2);
    assert_eq!(t.check(Api::ChatCompletions, &chat, &bad).unwrap(), Verdict::CacheDiffers { at: 1 });
    assert!(matches!(t.encoder(), EncoderKind::Fast { .. }));
    let Outcome::Tokens(again) = t.tokenize(Api::ChatCompletions, &chat, Some("s")).unwrap() else {
        panic!()
    };
    assert_eq!(again.cache, CacheUse::Miss);
    assert_eq!(again.ids, tokens.ids);
}

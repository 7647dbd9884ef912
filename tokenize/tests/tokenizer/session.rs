//! The session cache: every turn of many multi-turn conversations gives the same ids as encoding
//! the whole prompt, and the later turns reuse the earlier ones.

use infera_proto::types::Api;
use infera_tokenize::fixture::{self, Lcg};
use infera_tokenize::{CacheUse, EncoderChoice, EncoderKind, Outcome, SpecialTokens, Tokenizer, Tokens};
use serde_json::{Value, json};

use crate::support::{body, metaspace, special, with_template};

fn tokens(t: &Tokenizer, messages: &[Value], session: Option<&str>) -> Tokens {
    match t.tokenize(Api::ChatCompletions, &fixture::chat_body(messages), session).unwrap() {
        Outcome::Tokens(tokens) => tokens,
        other => panic!("no tokens: {other:?}"),
    }
}

/// Message text that stresses the cut points: special-token text inside content, whitespace
/// and newlines at the edges, multi-byte characters.
fn awkward_text(rng: &mut Lcg) -> String {
    let pieces = ["", " ", "\n", "  \n\t", "<|im_end|>", "<|im_start|>user", "日本語", "emoji🙂", "<|", "|>"];
    let mut s = String::new();
    for _ in 0..1 + rng.below(4) {
        s.push_str(pieces[rng.below(pieces.len())]);
        let words = rng.below(30);
        s.push_str(&fixture::text(rng, words));
        s.push_str(pieces[rng.below(pieces.len())]);
    }
    s
}

fn message(rng: &mut Lcg, awkward: bool) -> String {
    if awkward {
        return awkward_text(rng);
    }
    let words = 5 + rng.below(60);
    fixture::text(rng, words)
}

/// Plays `sessions` conversations turn by turn through `cached` and checks each turn against a
/// fresh encoding by `fresh`; returns (hits, turns).
fn play(cached: &Tokenizer, fresh: &Tokenizer, sessions: u64, turns: usize, awkward: bool) -> (usize, usize) {
    let (mut hits, mut played) = (0, 0);
    for seed in 0..sessions {
        let mut rng = Lcg::new(seed);
        let key = format!("session-{seed}");
        let mut messages = vec![];
        if rng.below(2) == 0 {
            messages.push(json!({"role": "system", "content": fixture::text(&mut rng, 20)}));
        }
        for turn in 0..turns {
            let user = message(&mut rng, awkward);
            messages.push(json!({"role": "user", "content": user}));
            let got = tokens(cached, &messages, Some(&key));
            let want = tokens(fresh, &messages, None);
            assert_eq!(got.ids, want.ids, "seed {seed} turn {turn}");
            played += 1;
            if let CacheUse::Hit(reused) = got.cache {
                assert!(reused > 0 && reused < got.ids.len());
                hits += 1;
            }
            let answer = message(&mut rng, awkward);
            messages.push(json!({"role": "assistant", "content": answer}));
        }
    }
    (hits, played)
}

#[test]
fn cached_turns_equal_whole_encodings_byte_level() {
    let cached = with_template(fixture::CHATML);
    // The cached side encodes fast, with offsets from the token bytes; the judge is `tokenizers`.
    assert_eq!(cached.encoder(), EncoderKind::Fast { offsets_from_bytes: true });
    let fresh = Tokenizer::new(crate::support::byte_level(), Some(fixture::CHATML), special())
        .unwrap()
        .with_encoder(EncoderChoice::Reference);
    let (hits, turns) = play(&cached, &fresh, 12, 6, false);
    // Every turn after the first of a session extends the previous prompt.
    assert_eq!(hits, turns - 12);
    let (hits, turns) = play(&cached, &fresh, 12, 6, true);
    assert!(hits >= turns / 2, "{hits} of {turns}");
    let stats = cached.cache_stats();
    assert_eq!(stats.entries, 12, "one entry per session key");
    assert!(stats.hits as usize >= hits && stats.reused_tokens > 0 && stats.bytes <= stats.capacity_bytes);
}

#[test]
fn cached_turns_equal_whole_encodings_metaspace_first() {
    // The first piece of a sequence is special here: cutting before an added token keeps the
    // suffix from starting one.
    let cached = Tokenizer::new(metaspace(), Some(fixture::CHATML), SpecialTokens::default())
        .unwrap()
        .with_session_cache(16 << 20);
    let fresh = Tokenizer::new(metaspace(), Some(fixture::CHATML), SpecialTokens::default()).unwrap();
    let (hits, turns) = play(&cached, &fresh, 8, 5, false);
    assert_eq!(hits, turns - 8);
    play(&cached, &fresh, 8, 5, true);
}

#[test]
fn an_edited_history_falls_back_to_what_still_matches() {
    let t = with_template(fixture::CHATML);
    let mut messages = fixture::conversation(3, 4, 40, true);
    tokens(&t, &messages, Some("s"));
    // The client rewrote the second user message: only the text before it can be reused.
    messages[3]["content"] = json!("a different question");
    let edited = tokens(&t, &messages, Some("s"));
    assert_eq!(edited.ids, tokens(&t, &messages, None).ids);
    // A different system prompt changes the very first turn: nothing to reuse.
    messages[0]["content"] = json!("another system prompt");
    let fresh = tokens(&t, &messages, Some("s"));
    assert_eq!(fresh.cache, CacheUse::Miss);
    assert_eq!(fresh.ids, tokens(&t, &messages, None).ids);
}

#[test]
fn a_prompt_that_diverges_inside_an_added_token_is_not_cut_at_it() {
    let raw = "{{ messages[0].content }}";
    for backend in [crate::support::byte_level(), metaspace()] {
        let cached = Tokenizer::new(backend.clone(), Some(raw), SpecialTokens::default())
            .unwrap()
            .with_session_cache(1 << 20);
        let fresh = Tokenizer::new(backend, Some(raw), SpecialTokens::default())
            .unwrap()
            .with_encoder(EncoderChoice::Reference);
        let turn = |t: &Tokenizer, text: &str, session| {
            tokens(t, &[json!({"role": "user", "content": text})], session)
        };
        turn(&cached, "x<|im_end|>pick<|im_end|>token<|im_end|>", Some("s"));
        // Shares "…token<|im_end" with the first turn, but there is no added token there now.
        let diverged = "x<|im_end|>pick<|im_end|>token<|im_endless";
        let got = turn(&cached, diverged, Some("s"));
        assert_eq!(got.ids, turn(&fresh, diverged, None).ids);
    }
}

#[test]
fn a_tiny_cache_evicts_and_stays_correct() {
    let t = Tokenizer::new(crate::support::byte_level(), Some(fixture::CHATML), special())
        .unwrap()
        .with_session_cache(4096);
    for round in 0..3 {
        for seed in 0..4u64 {
            let messages = fixture::conversation(seed, 2 + round, 30, false);
            let got = tokens(&t, &messages, Some(&seed.to_string()));
            assert_eq!(got.ids, tokens(&t, &messages, None).ids);
        }
    }
    assert!(t.cache_stats().bytes <= 4096);
    // Without a session key the cache is not asked.
    let b = body(json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}));
    let Outcome::Tokens(plain) = t.tokenize(Api::ChatCompletions, &b, None).unwrap() else { panic!() };
    assert_eq!(plain.cache, CacheUse::NotAsked);
}

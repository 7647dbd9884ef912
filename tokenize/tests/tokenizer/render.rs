//! Requests of each API → rendered text and ids, against expected strings and direct encodings.

use infera_proto::types::Api;
use infera_tokenize::{CacheUse, Outcome, Rendered, Skip, TokenizeError, Tokenizer, fixture};
use serde_json::json;

use crate::support::{body, byte_level, special, with_template};

fn chat_text(t: &Tokenizer, b: serde_json::Value) -> String {
    match t.render(Api::ChatCompletions, &body(b)).unwrap() {
        Rendered::Chat { text, .. } => text,
        other => panic!("not a chat prompt: {other:?}"),
    }
}

fn ids(outcome: Outcome) -> Vec<u32> {
    match outcome {
        Outcome::Tokens(t) => t.ids.to_vec(),
        other => panic!("no tokens: {other:?}"),
    }
}

#[test]
fn chatml_renders_like_transformers() {
    let t = with_template(fixture::CHATML);
    let b = json!({"model": "m", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
    ]});
    assert_eq!(
        chat_text(&t, b.clone()),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    // Chat ids are the rendered text encoded without adding special tokens; the ChatML tokens
    // are single ids.
    let got = ids(t.tokenize(Api::ChatCompletions, &body(b.clone()), None).unwrap());
    assert_eq!(got, t.encode(&chat_text(&t, b), false).unwrap());
    let im_start = t.backend().token_to_id("<|im_start|>").unwrap();
    assert_eq!(got.iter().filter(|&&id| id == im_start).count(), 3);
}

#[test]
fn tools_and_tool_calls_render_as_python_json() {
    let t = with_template(fixture::CHATML);
    let b = json!({"model": "m",
    "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather in a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "messages": [
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]});
    let expected = concat!(
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n<tools>\n",
        r#"{"type": "function", "function": {"name": "weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}, "defer_loading": null}"#,
        "\n</tools><|im_end|>\n<|im_start|>user\nParis?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n",
        r#"{"name": "weather", "arguments": {"city": "Paris"}}"#,
        "\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    );
    assert_eq!(chat_text(&t, b), expected);
}

#[test]
fn continue_final_message_appends_the_prefix_without_a_second_bos() {
    let t = with_template(fixture::CHATML);
    let messages =
        json!([{"role": "user", "content": "Count"}, {"role": "assistant", "content": "one, two,"}]);
    let b = json!({"model": "m", "messages": messages, "continue_final_message": true});
    let rendered = chat_text(&t, b.clone());
    assert!(rendered.ends_with("<|im_start|>assistant\n"), "{rendered}");
    let mut expected = t.encode(&rendered, false).unwrap();
    expected.extend(t.encode("one, two,", true).unwrap());
    assert_eq!(ids(t.tokenize(Api::ChatCompletions, &body(b), None).unwrap()), expected);
}

#[test]
fn templates_without_system_support() {
    let system_first = json!({"model": "m", "messages": [
        {"role": "system", "content": "S"}, {"role": "user", "content": "U"}]});
    // Chat completions render as sent: a raising template is an error (SGLang answers 400) …
    let raises = with_template(fixture::RAISES_ON_SYSTEM);
    let err = raises.tokenize(Api::ChatCompletions, &body(system_first.clone()), None).unwrap_err();
    assert!(matches!(&err, TokenizeError::Template(m) if m == "System role not supported"), "{err}");
    // … and a folding template folds.
    let folds = with_template(fixture::FOLDS_SYSTEM);
    assert_eq!(
        chat_text(&folds, system_first),
        "<|endoftext|><|im_start|>user\nS\n\nU<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn completions_and_generate() {
    let t = with_template(fixture::CHATML);
    let text = "the router picks a worker";
    let completion = t.tokenize(Api::Completions, &body(json!({"model": "m", "prompt": text})), None);
    assert_eq!(ids(completion.unwrap()), t.encode(text, true).unwrap());
    // Token ids pass through untouched, even ids the vocabulary does not have.
    let generate = t.tokenize(Api::Generate, &body(json!({"input_ids": [5, 4_000_000, 0]})), Some("s"));
    match generate.unwrap() {
        Outcome::Tokens(tokens) => {
            assert_eq!(&*tokens.ids, [5, 4_000_000, 0]);
            assert_eq!(tokens.cache, CacheUse::NotAsked);
        }
        other => panic!("{other:?}"),
    }
    let batch = t.tokenize(Api::Generate, &body(json!({"text": ["a", "b"]})), None).unwrap();
    assert_eq!(batch, Outcome::Skipped(Skip::Batch));
}

#[test]
fn without_a_chat_template_only_chat_is_skipped() {
    let t = Tokenizer::new(byte_level(), None, special()).unwrap();
    assert!(!t.has_chat_template());
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(
        t.tokenize(Api::ChatCompletions, &body(chat), None).unwrap(),
        Outcome::Skipped(Skip::NoChatTemplate)
    );
    assert!(matches!(
        t.tokenize(Api::Completions, &body(json!({"prompt": "x"})), None),
        Ok(Outcome::Tokens(_))
    ));
}

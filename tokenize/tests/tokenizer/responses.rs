//! `/v1/responses`: normalised to chat messages, and ambiguous when the placement of system
//! messages decides the rendering.

use infera_proto::types::Api;
use infera_tokenize::{Ambiguity, Outcome, Rendered, Skip, fixture};
use serde_json::json;

use crate::support::{body, with_template};

/// Instructions plus a developer message after the first turn: SGLang renders it inline or
/// coalesces it into the leading system message, depending on its version and template probe.
fn mid_conversation_system() -> serde_json::Value {
    json!({"model": "m", "instructions": "S", "input": [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "developer", "content": "D"},
        {"role": "user", "content": "U2"},
    ]})
}

#[test]
fn instructions_and_a_string_input_are_a_system_and_a_user_message() {
    let t = with_template(fixture::CHATML);
    let responses = body(json!({"model": "m", "instructions": "S", "input": "U"}));
    let chat = body(
        json!({"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}),
    );
    assert_eq!(t.render(Api::Responses, &responses).unwrap(), t.render(Api::ChatCompletions, &chat).unwrap());
    assert_eq!(
        t.tokenize(Api::Responses, &responses, None).unwrap(),
        t.tokenize(Api::ChatCompletions, &chat, None).unwrap()
    );
}

#[test]
fn a_single_leading_system_message_is_not_ambiguous_even_for_folding_templates() {
    let t = with_template(fixture::FOLDS_SYSTEM);
    let b = body(json!({"model": "m", "instructions": "S", "input": [{"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "U"}]}]}));
    assert_eq!(
        t.render(Api::Responses, &b).unwrap(),
        Rendered::Chat {
            text: "<|endoftext|><|im_start|>user\nS\n\nU<|im_end|>\n<|im_start|>assistant\n".into(),
            assistant_prefix: None
        }
    );
}

#[test]
fn a_mid_conversation_system_message_is_ambiguous() {
    let b = body(mid_conversation_system());
    // Inline support renders it in place; coalescing moves it up: the texts differ.
    let chatml = with_template(fixture::CHATML);
    assert_eq!(
        chatml.tokenize(Api::Responses, &b, None).unwrap(),
        Outcome::Ambiguous(Ambiguity::SystemPlacement)
    );
    // A template that raises on a system role, and one that folds the leading system message
    // (it then sees two assistant-less turns in a row and raises on alternation).
    for template in [fixture::RAISES_ON_SYSTEM, fixture::FOLDS_SYSTEM] {
        let outcome = with_template(template).tokenize(Api::Responses, &b, None).unwrap();
        assert!(matches!(outcome, Outcome::Ambiguous(Ambiguity::TemplateRaises(_))), "{outcome:?}");
    }
}

#[test]
fn a_template_that_places_system_text_the_same_either_way_is_not_ambiguous() {
    // All system text is gathered at the top whatever its position: coalescing changes nothing.
    let gathers = "{% for m in messages if m.role == 'system' %}{{ m.content }}|{% endfor %}{% for m in messages if m.role != 'system' %}{{ m.content }};{% endfor %}";
    let t = with_template(gathers);
    let b = body(json!({"model": "m", "instructions": "S", "input": [
        {"role": "user", "content": "U1"}, {"role": "system", "content": "T"}, {"role": "user", "content": "U2"}]}));
    // "S\n\nT" joined, against "S" and "T" apart: different, so still ambiguous …
    assert_eq!(t.render(Api::Responses, &b).unwrap(), Rendered::Ambiguous(Ambiguity::SystemPlacement));
    let joins = "{{ messages | selectattr('role', 'equalto', 'system') | map(attribute='content') | join('\n\n') }}|{% for m in messages if m.role != 'system' %}{{ m.content }};{% endfor %}";
    // … while a template that joins them itself the same way renders one text.
    let t = with_template(joins);
    assert_eq!(
        t.render(Api::Responses, &b).unwrap(),
        Rendered::Chat { text: "S\n\nT|U1;U2;".into(), assistant_prefix: None }
    );
}

#[test]
fn stored_history_and_media_are_skipped() {
    let t = with_template(fixture::CHATML);
    let stored = body(json!({"model": "m", "input": "more", "previous_response_id": "resp_1"}));
    assert_eq!(t.tokenize(Api::Responses, &stored, None).unwrap(), Outcome::Skipped(Skip::StoredHistory));
    let image = body(json!({"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what is it"}, {"type": "input_image", "image_url": "data:,"}]}]}));
    assert_eq!(t.tokenize(Api::Responses, &image, None).unwrap(), Outcome::Skipped(Skip::Media));
}

//! Anthropic's `/v1/messages`: rendered as the chat request SGLang converts it to, tool calls
//! and tool results included; what SGLang renders by the model is skipped.

use infera_proto::types::Api;
use infera_tokenize::{Outcome, Rendered, Skip, fixture};
use serde_json::json;

use crate::support::{body, with_template};

#[test]
fn a_message_renders_and_tokenizes_as_its_chat_request() {
    let t = with_template(fixture::CHATML);
    let message = body(json!({"model": "m", "max_tokens": 8, "system": "S", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "U1"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
        {"role": "user", "content": "U2"},
    ]}));
    let chat = body(json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "calling",
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
        {"role": "user", "content": "U2"},
    ]}));
    let rendered = t.render(Api::Messages, &message).unwrap();
    assert!(
        matches!(&rendered, Rendered::Chat { text, .. } if text.contains("S") && text.contains("U2")),
        "{rendered:?}"
    );
    assert_eq!(rendered, t.render(Api::ChatCompletions, &chat).unwrap());
    assert_eq!(
        t.tokenize(Api::Messages, &message, None).unwrap(),
        t.tokenize(Api::ChatCompletions, &chat, None).unwrap()
    );
}

#[test]
fn images_and_thinking_are_not_tokenized() {
    let t = with_template(fixture::CHATML);
    let image = body(json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
    ]}]}));
    assert_eq!(t.tokenize(Api::Messages, &image, None).unwrap(), Outcome::Skipped(Skip::Media));
    let thinking = body(json!({"model": "m", "max_tokens": 8, "thinking": {"type": "disabled"},
        "messages": [{"role": "user", "content": "U"}]}));
    assert_eq!(t.tokenize(Api::Messages, &thinking, None).unwrap(), Outcome::Skipped(Skip::Unsupported));
}

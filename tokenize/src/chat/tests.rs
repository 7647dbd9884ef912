use serde_json::json;

use super::*;
use crate::config::{SpecialTokens, TemplateSet};

/// Prints each message as JSON, to see exactly what the template receives.
const ECHO: &str = "{% for m in messages %}{{ m|tojson }}\n{% endfor %}{{ tools|tojson }}";
/// The same, but looping over list content (SGLang's "openai" content format).
const ECHO_PARTS: &str = "{% for m in messages %}{% for p in m['content'] %}{% endfor %}{{ m|tojson }}\n{% endfor %}{{ tools|tojson }}";

fn input(body: Value) -> ChatInput {
    let o = body.as_object().unwrap();
    ChatInput {
        messages: o["messages"].as_array().unwrap().clone(),
        tools: o.get("tools").and_then(Value::as_array).cloned().unwrap_or_default(),
        tool_choice: o.get("tool_choice").cloned().unwrap_or(Value::Null),
        continue_final_message: o.get("continue_final_message").is_some_and(|v| v == true),
        ..ChatInput::default()
    }
}

fn render_with(source: &str, body: Value) -> Result<Result<ChatText, Skip>, TokenizeError> {
    let set = TemplateSet { origin: "t".into(), templates: vec![("default".into(), source.into())] };
    let template = ChatTemplate::compile(&set, &SpecialTokens::default()).unwrap();
    let input = input(body);
    render(&template, &input, &input.messages)
}

fn text(source: &str, body: Value) -> String {
    render_with(source, body).unwrap().unwrap().text
}

#[test]
fn messages_are_model_dumped_like_sglang() {
    let body = json!({"messages": [
        {"role": "System", "content": "s", "extra": 1},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]},
    ]});
    let expected = [
        r#"{"role": "system", "content": "s"}"#,
        r#"{"role": "user", "content": "a b"}"#,
        r#"{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "index": null, "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}"#,
        r#"{"role": "tool", "content": "r1 r2", "tool_call_id": "c1"}"#,
        "null",
    ];
    assert_eq!(text(ECHO, body), expected.join("\n"));
}

#[test]
fn list_content_stays_a_list_for_templates_that_loop_over_it() {
    let body = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]});
    assert_eq!(
        text(ECHO_PARTS, body),
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}]}\nnull"
    );
}

#[test]
fn a_final_assistant_message_becomes_a_user_message_or_the_prefix_to_continue() {
    let messages = json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "partial"}]);
    let converted = text(ECHO, json!({"messages": messages}));
    assert!(converted.ends_with("{\"role\": \"user\", \"content\": \"partial\"}\nnull"), "{converted}");
    let continued =
        render_with(ECHO, json!({"messages": messages, "continue_final_message": true})).unwrap().unwrap();
    assert_eq!(continued.text, "{\"role\": \"user\", \"content\": \"q\"}\nnull");
    assert_eq!(continued.assistant_prefix.as_deref(), Some("partial"));
}

#[test]
fn tools_are_dumped_in_the_clients_key_order_and_filtered_by_a_named_choice() {
    let tools = json!([
        {"type": "function", "function": {"parameters": {"type": "object"}, "name": "a", "strict": null}},
        {"type": "function", "function": {"name": "b", "description": "d", "strict": true}},
    ]);
    let messages = json!([{"role": "user", "content": "q"}]);
    let all = text(ECHO, json!({"messages": messages, "tools": tools}));
    assert!(all.ends_with(concat!(
        r#"[{"type": "function", "function": {"parameters": {"type": "object"}, "name": "a", "description": null}, "defer_loading": null}, "#,
        r#"{"type": "function", "function": {"name": "b", "description": "d", "strict": true, "parameters": null}, "defer_loading": null}]"#
    )), "{all}");
    let named = text(
        ECHO,
        json!({"messages": messages, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "b"}}}),
    );
    assert!(named.contains("\"name\": \"b\"") && !named.contains("\"name\": \"a\""), "{named}");
    let none = text(ECHO, json!({"messages": messages, "tools": tools, "tool_choice": "none"}));
    assert!(none.ends_with("null"), "{none}");
}

#[test]
fn a_template_that_fails_with_wrapped_tools_is_retried_with_bare_functions() {
    let source = "{% for t in tools %}{{ t['name'] }}{% if t['function'] is defined %}{{ raise_exception('wrapped') }}{% endif %}{% endfor %}";
    let body = json!({"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function", "function": {"name": "f"}}]});
    assert_eq!(text(source, body), "f");
}

#[test]
fn bad_messages_are_request_errors_and_media_is_skipped() {
    for bad in [
        json!([{"role": "wizard", "content": "x"}]),
        json!([{"content": "x"}]),
        json!([{"role": "user"}]),
        json!([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]),
        json!([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]),
        json!([{"role": "user", "content": [{"type": "mystery"}]}]),
    ] {
        assert!(
            matches!(render_with(ECHO, json!({"messages": bad})), Err(TokenizeError::Request(_))),
            "{bad}"
        );
    }
    let media = json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]});
    assert!(matches!(render_with(ECHO, media), Ok(Err(Skip::Media))));
}

use serde_json::json;

use super::*;

fn chat(body: Value) -> ChatInput {
    match to_chat(body.as_object().unwrap()).unwrap() {
        Prompt::Chat(c) => *c,
        other => panic!("not chat: {other:?}"),
    }
}

fn skipped(body: Value) -> Skip {
    match to_chat(body.as_object().unwrap()).unwrap() {
        Prompt::Skip(s) => s,
        other => panic!("not skipped: {other:?}"),
    }
}

#[test]
fn system_and_turns_become_chat_messages_as_sglang_builds_them() {
    let c = chat(json!({
        "model": "m", "max_tokens": 5,
        "system": [{"type": "text", "text": "be brief"}, {"type": "text", "text": "and kind"}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": "before"},
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "42"}]},
                {"type": "text", "text": "after"},
                {"type": "text", "text": "more"},
            ]},
            {"role": "assistant", "content": []},
        ],
    }));
    assert_eq!(
        Value::Array(c.messages),
        json!([
            {"role": "system", "content": "be brief\nand kind"},
            {"role": "user", "content": "hi"},
            {"role": "assistant",
             "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}],
             "content": "calling"},
            // The text before a tool result goes first, as its own user message.
            {"role": "user", "content": "before"},
            {"role": "tool", "tool_call_id": "t1", "content": "42"},
            {"role": "user", "content": [{"type": "text", "text": "after"}, {"type": "text", "text": "more"}]},
            // An empty assistant turn keeps its place.
            {"role": "assistant", "content": ""},
        ])
    );
    assert!(c.tools.is_empty());
    assert_eq!(c.tool_choice, Value::Null);
    assert!(!c.coalesces_system);
}

#[test]
fn a_blank_system_string_is_no_system_message_and_results_alone_leave_no_user_turn() {
    let c = chat(json!({
        "system": "  ",
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "id": "legacy", "content": "done"}]},
            {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x", "content": null}]},
        ],
    }));
    assert_eq!(
        Value::Array(c.messages),
        json!([
            {"role": "tool", "tool_call_id": "legacy", "content": "done"},
            {"role": "assistant", "content": "Tool result: "},
        ])
    );
}

#[test]
fn custom_tools_are_chat_functions_and_tool_choice_is_mapped() {
    let body = |choice: Value| {
        json!({
            "messages": [{"role": "user", "content": "x"}],
            "tools": [
                {"name": "get", "input_schema": {"properties": {}}},
                {"type": "web_search_20250305", "name": "web_search"},
            ],
            "tool_choice": choice,
        })
    };
    let c = chat(body(json!({"type": "any"})));
    assert_eq!(
        Value::Array(c.tools),
        json!([{"type": "function", "defer_loading": null, "function": {
            "name": "get", "description": "", "parameters": {"properties": {}, "type": "object"}, "strict": false,
        }}])
    );
    assert_eq!(c.tool_choice, json!("required"));
    assert_eq!(chat(body(Value::Null)).tool_choice, json!("auto"));
    assert_eq!(chat(body(json!({"type": "none"}))).tool_choice, json!("none"));
    assert_eq!(
        chat(body(json!({"type": "tool", "name": "get"}))).tool_choice,
        json!({"type": "function", "function": {"name": "get"}})
    );
    let effort = json!({"messages": [], "output_config": {"effort": "xhigh"}});
    assert_eq!(chat(effort).reasoning_effort, Some(json!("max")));
}

#[test]
fn what_sglang_renders_by_the_model_is_skipped() {
    let turn = |content: Value| json!({"messages": [{"role": "user", "content": content}]});
    let image = json!([{"type": "image", "source": {"type": "url", "url": "http://x/i.png"}}]);
    assert_eq!(skipped(turn(image)), Skip::Media);
    let thinking =
        json!({"messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]}]});
    assert_eq!(skipped(thinking), Skip::Unsupported);
    let switch = json!({"messages": [], "thinking": {"type": "enabled", "budget_tokens": 2048}});
    assert_eq!(skipped(switch), Skip::Unsupported);
    let inline_system = json!({"messages": [{"role": "system", "content": "s"}]});
    assert_eq!(skipped(inline_system), Skip::Unsupported);
    let bad = json!({"messages": [{"role": "tool", "content": "x"}]});
    assert!(to_chat(bad.as_object().unwrap()).is_err());
    assert!(to_chat(json!({"messages": "x"}).as_object().unwrap()).is_err());
}

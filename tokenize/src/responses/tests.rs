use serde_json::json;

use super::*;

fn chat(body: Value) -> ChatInput {
    match to_chat(body.as_object().unwrap()).unwrap() {
        Prompt::Chat(c) => *c,
        other => panic!("not chat: {other:?}"),
    }
}

#[test]
fn input_items_become_chat_messages() {
    let c = chat(json!({
        "instructions": "be brief",
        "input": [
            {"type": "message", "role": "user", "id": "m1", "status": "completed",
             "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"role": "developer", "content": "use tools"},
            {"role": "user", "content": "and?"},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "web_search"}],
        "reasoning": {"effort": "low"},
    }));
    assert_eq!(
        Value::Array(c.messages),
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            // Reasoning, text and the tool call are one assistant turn.
            {"role": "assistant", "reasoning_content": "think", "content": [{"type": "text", "text": "calling"}],
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "system", "content": "Developer instructions:\nuse tools"},
            {"role": "user", "content": "and?"},
        ])
    );
    assert_eq!(
        Value::Array(c.tools),
        json!([{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object"}}}])
    );
    assert_eq!(c.tool_choice, json!("auto"));
    assert_eq!(c.reasoning_effort, Some(json!("low")));
    assert!(c.coalesces_system);
}

#[test]
fn system_messages_coalesce_into_one_leading_message() {
    let messages = [
        json!({"role": "system", "content": "a"}),
        json!({"role": "user", "content": "u"}),
        json!({"role": "system", "content": [{"type": "input_text", "text": "b"}]}),
    ];
    assert_eq!(
        coalesce_system(&messages),
        [json!({"role": "system", "content": "a\n\nb"}), json!({"role": "user", "content": "u"})]
    );
    // One leading system message is its own coalescing: nothing to choose between.
    assert_eq!(coalesce_system(&messages[..2]), messages[..2]);
}

#[test]
fn what_the_engine_holds_or_writes_itself_is_skipped() {
    let skip = |body: Value| match to_chat(body.as_object().unwrap()).unwrap() {
        Prompt::Skip(s) => s,
        other => panic!("not skipped: {other:?}"),
    };
    assert_eq!(skip(json!({"input": "x", "previous_response_id": "resp_1"})), Skip::StoredHistory);
    assert_eq!(skip(json!({"input": "x", "tools": [{"type": "custom", "name": "c"}]})), Skip::Unsupported);
    assert!(matches!(to_chat(json!({"input": 5}).as_object().unwrap()), Err(TokenizeError::Request(_))));
    assert!(matches!(
        to_chat(json!({"input": [{"type": "mystery"}]}).as_object().unwrap()),
        Err(TokenizeError::Request(_))
    ));
}

//! Server-sent event streams as JSON, so the comparator can hold one stream to another: each
//! event becomes `{"event": name, "data": …}` (`event` only when named, `data` parsed as JSON
//! when it is, else the text — `"[DONE]"`), and runs of events of one shape collapse into one,
//! since how many content chunks a stream has is timing and text, not shape.

use serde_json::{Map, Value, json};

use super::JsonType;

/// The events of an SSE body, in order ([`crate::sse::parse`]).
pub fn parse_sse(body: &str) -> Vec<Value> {
    let events = crate::sse::parse(body).into_iter().map(|e| {
        let mut event = Map::new();
        if let Some(name) = e.name {
            event.insert("event".into(), Value::String(name));
        }
        let parsed = serde_json::from_str(&e.data).unwrap_or(Value::String(e.data));
        event.insert("data".into(), parsed);
        Value::Object(event)
    });
    events.collect()
}

/// `value` with every leaf replaced by its [`JsonType`] name, every array by its first
/// element's skeleton, and every object whose values are all numbers of one type by `{"*":
/// type}` (a map keyed by data, such as completions' `top_logprobs` keyed by token text): two
/// values have equal skeletons when they have the same shape.
pub fn skeleton(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let types: Vec<JsonType> = map.values().map(JsonType::of).collect();
            let numeric = types.first().is_some_and(|t| matches!(t, JsonType::Integer | JsonType::Float));
            if numeric && types.iter().all(|t| *t == types[0]) {
                return json!({ "*": types[0].name() });
            }
            Value::Object(map.iter().map(|(k, v)| (k.clone(), skeleton(v))).collect())
        }
        Value::Array(items) => Value::Array(items.first().map(skeleton).into_iter().collect()),
        leaf => json!(JsonType::of(leaf).name()),
    }
}

/// `events` with each run of consecutive events of equal [`skeleton`] kept as its first event.
pub fn collapse_runs(events: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut last: Option<Value> = None;
    for e in events {
        let s = skeleton(e);
        if last.as_ref() != Some(&s) {
            out.push(e.clone());
            last = Some(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_with_names_json_and_done() {
        let body = "event: response.created\ndata: {\"a\":1}\n\ndata: {\"b\":[1,2]}\n\ndata: [DONE]\n\n";
        let events = parse_sse(body);
        assert_eq!(
            events,
            [
                json!({"event": "response.created", "data": {"a": 1}}),
                json!({"data": {"b": [1, 2]}}),
                json!({"data": "[DONE]"}),
            ]
        );
        assert_eq!(parse_sse("data: x\r\n\r\n"), [json!({"data": "x"})]);
        assert!(parse_sse("\n\n").is_empty());
    }

    #[test]
    fn runs_of_one_shape_collapse() {
        let chunk = |text: &str, ids: &[u32]| json!({"data": {"text": text, "ids": ids}});
        let events = [
            json!({"data": {"role": "assistant"}}),
            chunk("a", &[1]),
            chunk("bc", &[2, 3, 4]),
            chunk("d", &[5]),
            json!({"data": {"text": "x", "ids": [1], "finish": "length"}}),
            json!({"data": "[DONE]"}),
        ];
        let collapsed = collapse_runs(&events);
        assert_eq!(collapsed.len(), 4);
        assert_eq!(collapsed[1], events[1]);
        assert_eq!(skeleton(&json!({"a": [1.5, 2], "b": null})), json!({"a": ["float"], "b": "null"}));
        // Maps keyed by data (token texts) have one skeleton whatever their keys.
        assert_eq!(skeleton(&json!({" the": -1.5, "of": -2.0})), skeleton(&json!({"x": -0.5})));
        assert_ne!(skeleton(&json!({"a": 1, "b": 1.5})), skeleton(&json!({"a": 1})));
    }
}

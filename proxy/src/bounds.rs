//! What a request may hold, checked before it costs memory or state anywhere: how many JSON
//! values its body parses into (a 30 MiB array of numbers is 15 M values, half a gigabyte as a
//! tree), and how long its ids, names and session keys are (a session key is a key of control's
//! session map, a request id travels to control and the engines).

use serde_json::{Map, Value};

use crate::error::ProxyError;

/// The longest request id (`x-request-id`, a body's `rid` or `request_id`), model name and
/// session key (`x-session-id`, `user`, `prompt_cache_key`), in bytes: control's own bound.
pub use infera_proto::types::MAX_ID_BYTES;

/// The deepest nesting a body may have: serde_json's own recursion limit, which refuses anything
/// deeper when it parses; [`values_in`] stops counting there.
const MAX_DEPTH: usize = 128;

/// How many JSON values `body` parses into — scalars, arrays and objects, and each object
/// member's key — counted without parsing it: the root, each `:` (a member's key and value),
/// each array element (its first, and one per `,`), outside strings. Exact for valid JSON; for
/// anything else a guess the parser then refuses. Linear in the bytes, no allocation beyond the
/// nesting stack.
pub fn values_in(body: &[u8]) -> Option<usize> {
    /// What a `,` separates in the innermost container.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum In {
        Array,
        Object,
    }
    let mut stack: Vec<In> = Vec::new();
    let (mut count, mut any) = (0usize, false);
    let (mut in_string, mut escaped, mut first_element) = (false, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if b.is_ascii_whitespace() {
            continue;
        }
        if !any {
            any = true;
            count += 1;
        }
        if first_element && b != b']' {
            count += 1;
        }
        first_element = false;
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                if stack.len() == MAX_DEPTH {
                    return None;
                }
                stack.push(if b == b'[' { In::Array } else { In::Object });
                first_element = b == b'[';
            }
            b']' | b'}' => {
                stack.pop();
            }
            b',' if stack.last() == Some(&In::Array) => count += 1,
            b':' => count += 2,
            _ => {}
        }
    }
    Some(count)
}

/// Refuses a body of more than `max_values` values (413: it would not fit the memory bound).
pub fn check_values(body: &[u8], max_values: usize) -> Result<(), ProxyError> {
    let Some(values) = values_in(body) else {
        return Err(ProxyError::BadRequest("request body nests JSON deeper than 128 levels"));
    };
    if values > max_values {
        return Err(ProxyError::BodyTooComplex { values, limit: max_values });
    }
    Ok(())
}

/// Refuses an id, name or session key longer than [`MAX_ID_BYTES`]: `what` names it.
pub fn check_len(what: &'static str, value: &str) -> Result<(), ProxyError> {
    if value.len() > MAX_ID_BYTES {
        return Err(ProxyError::TooLong { what, limit: MAX_ID_BYTES });
    }
    Ok(())
}

/// Refuses a header value (a request id, a session key) longer than [`MAX_ID_BYTES`] bytes as
/// sent, whatever its encoding.
pub fn check_header(what: &'static str, value: &http::HeaderValue) -> Result<(), ProxyError> {
    if value.as_bytes().len() > MAX_ID_BYTES {
        return Err(ProxyError::TooLong { what, limit: MAX_ID_BYTES });
    }
    Ok(())
}

/// The ids, names and keys a body carries, each checked by [`check_len`].
pub fn check_body_ids(body: &Map<String, Value>) -> Result<(), ProxyError> {
    for (key, what) in [
        ("model", "model"),
        ("rid", "rid"),
        ("request_id", "request_id"),
        ("user", "user"),
        ("prompt_cache_key", "prompt_cache_key"),
    ] {
        if let Some(Value::String(s)) = body.get(key) {
            check_len(what, s)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of a parsed document, counted the slow way (keys included).
    fn parsed(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(parsed).sum(),
            Value::Object(o) => o.values().map(|v| 1 + parsed(v)).sum(),
            _ => 0,
        }
    }

    #[test]
    fn the_scan_counts_what_the_parser_builds() {
        let docs = [
            r#"{}"#,
            r#"[]"#,
            r#"[1]"#,
            r#"[1, 2, [3, []], {"a": [4, 5]}]"#,
            r#"{"model": "m", "messages": [{"role": "user", "content": "a, b: [c]"}], "n": 1}"#,
            r#"{"text": "quote \" and \\ and , : [ ] { }", "x": [ ] , "y" : { } }"#,
            "  42  ",
        ];
        for doc in docs {
            let v: Value = serde_json::from_str(doc).unwrap();
            assert_eq!(values_in(doc.as_bytes()), Some(parsed(&v)), "{doc}");
        }
        let big = format!("{{\"input_ids\": [{}]}}", vec!["1"; 10_000].join(","));
        assert_eq!(values_in(big.as_bytes()), Some(10_003));
    }

    #[test]
    fn too_many_values_and_too_long_ids_are_refused_by_name() {
        let big = format!("[{}]", vec!["0"; 101].join(","));
        assert!(matches!(
            check_values(big.as_bytes(), 100),
            Err(ProxyError::BodyTooComplex { values: 102, .. })
        ));
        assert!(check_values(big.as_bytes(), 102).is_ok());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(values_in(deep.as_bytes()), Some(MAX_DEPTH), "as deep as the parser goes");
        let deeper = "[".repeat(MAX_DEPTH + 1);
        assert_eq!(values_in(deeper.as_bytes()), None, "deeper than the parser goes");
        assert!(matches!(check_values(deeper.as_bytes(), 1_000), Err(ProxyError::BadRequest(_))));
        let mut body = Map::new();
        body.insert("user".into(), Value::String("u".repeat(MAX_ID_BYTES)));
        assert!(check_body_ids(&body).is_ok());
        body.insert("user".into(), Value::String("u".repeat(MAX_ID_BYTES + 1)));
        match check_body_ids(&body) {
            Err(ProxyError::TooLong { what: "user", .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}

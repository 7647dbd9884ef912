//! Request bodies: valid ones per API, JSON edits (wrong types, huge numbers, deep nesting),
//! byte-level damage (truncation, invalid UTF-8), and header bytes.

use infera_proto::types::Api;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

pub(crate) fn api() -> impl Strategy<Value = Api> {
    prop::sample::select(Api::ALL.to_vec())
}

pub(crate) fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), Just("  ".to_owned()), "[a-z ]{1,12}", any::<String>()]
}

pub(crate) fn key() -> impl Strategy<Value = String> {
    let known = [
        "model",
        "messages",
        "prompt",
        "input_ids",
        "text",
        "input",
        "instructions",
        "stream",
        "n",
        "user",
        "query",
        "documents",
        "system",
        "max_tokens",
    ];
    prop_oneof![prop::sample::select(known.to_vec()).prop_map(str::to_owned), "[a-z_]{1,8}"]
}

pub(crate) fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

pub(crate) fn content() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::from),
        prop::collection::vec(text(), 0..3)
            .prop_map(|t| json!(t.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>())),
        json(),
    ]
}

/// A body each API accepts: chat messages, prompts as text, texts or token arrays, ids, input.
pub(crate) fn valid(api: Api) -> BoxedStrategy<Map<String, Value>> {
    let role = prop::sample::select(vec!["system", "user", "assistant", "tool"]);
    let message = (role, content()).prop_map(|(r, c)| json!({"role": r, "content": c}));
    let ids = prop::collection::vec(any::<u32>(), 0..6);
    let body = match api {
        Api::ChatCompletions => {
            prop::collection::vec(message, 0..4).prop_map(|m| json!({"model": "m", "messages": m})).boxed()
        }
        Api::Completions => prop_oneof![
            text().prop_map(Value::from),
            prop::collection::vec(text(), 0..3).prop_map(|t| json!(t)),
            prop::collection::vec(ids.clone(), 0..3).prop_map(|t| json!(t)),
        ]
        .prop_map(|p| json!({"model": "m", "prompt": p}))
        .boxed(),
        Api::Generate => prop_oneof![
            text().prop_map(|t| json!({"text": t})),
            ids.clone().prop_map(|i| json!({"input_ids": i})),
            prop::collection::vec(ids, 0..3).prop_map(|i| json!({"model": "m", "input_ids": i})),
        ]
        .boxed(),
        Api::Responses => {
            content().prop_map(|c| json!({"model": "m", "input": c, "instructions": "be brief"})).boxed()
        }
        Api::Messages => (prop::collection::vec(message, 0..4), content(), 1u64..64)
            .prop_map(
                |(m, system, max)| json!({"model": "m", "max_tokens": max, "system": system, "messages": m}),
            )
            .boxed(),
        Api::Embeddings | Api::Classify => prop_oneof![
            text().prop_map(Value::from),
            prop::collection::vec(text(), 0..3).prop_map(|t| json!(t)),
            ids.clone().prop_map(|i| json!(i)),
            prop::collection::vec(ids, 0..3).prop_map(|i| json!(i)),
        ]
        .prop_map(|input| json!({"model": "m", "input": input}))
        .boxed(),
        Api::Rerank => (text(), prop::collection::vec(text(), 0..3))
            .prop_map(|(query, documents)| json!({"query": query, "documents": documents}))
            .boxed(),
    };
    (body, any::<Option<bool>>(), prop::option::of(1u64..4))
        .prop_map(|(mut b, stream, n)| {
            let o = b.as_object_mut().expect("an object");
            if let Some(s) = stream {
                o.insert("stream".into(), s.into());
            }
            if let Some(n) = n {
                o.insert("n".into(), n.into());
            }
            std::mem::take(o)
        })
        .boxed()
}

#[derive(Clone, Debug)]
pub(crate) enum Edit {
    Set(String, Value),
    Remove(String),
    /// A raw literal in place of a key's value: huge numbers, bad escapes, deep nesting.
    Raw(String, String),
}

pub(crate) fn edit() -> impl Strategy<Value = Edit> {
    let raw = prop_oneof![
        prop::sample::select(vec![
            "1e400",
            "-1e400",
            "123456789012345678901234567890",
            "-0",
            "\"\\ud800\"",
            "\"\\u0000\"",
            "01",
            "NaN"
        ])
        .prop_map(str::to_owned),
        (100usize..140).prop_map(|d| format!("{}{}", "[".repeat(d), "]".repeat(d))),
        (100usize..140).prop_map(|d| format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d))),
    ];
    prop_oneof![
        4 => (key(), json()).prop_map(|(k, v)| Edit::Set(k, v)),
        2 => key().prop_map(Edit::Remove),
        1 => (key(), raw).prop_map(|(k, r)| Edit::Raw(k, r)),
    ]
}

/// Byte-level damage after the JSON edits.
#[derive(Clone, Debug)]
pub(crate) enum Damage {
    None,
    Truncate(usize),
    Insert(usize, u8),
    WrapInArray,
}

pub(crate) fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        6 => Just(Damage::None),
        1 => any::<usize>().prop_map(Damage::Truncate),
        1 => (any::<usize>(), prop_oneof![Just(0xffu8), Just(0xc3), Just(0x80), Just(0), any::<u8>()])
            .prop_map(|(at, b)| Damage::Insert(at, b)),
        1 => Just(Damage::WrapInArray),
    ]
}

pub(crate) fn render(mut body: Map<String, Value>, edits: &[Edit], damage: &Damage) -> Vec<u8> {
    let mut raws = Vec::new();
    for e in edits {
        match e {
            Edit::Set(k, v) => drop(body.insert(k.clone(), v.clone())),
            Edit::Remove(k) => drop(body.remove(k)),
            Edit::Raw(k, r) => {
                body.insert(k.clone(), Value::from(format!("@raw{}@", raws.len())));
                raws.push(r.clone());
            }
        }
    }
    let mut text = Value::Object(body).to_string();
    for (i, r) in raws.iter().enumerate() {
        text = text.replace(&format!("\"@raw{i}@\""), r);
    }
    let mut bytes = text.into_bytes();
    match *damage {
        Damage::None => {}
        Damage::Truncate(n) => bytes.truncate(n % (bytes.len() + 1)),
        Damage::Insert(at, b) => bytes.insert(at % (bytes.len() + 1), b),
        Damage::WrapInArray => {
            bytes.insert(0, b'[');
            bytes.push(b']');
        }
    }
    bytes
}

pub(crate) fn mutated() -> impl Strategy<Value = (Api, Vec<u8>)> {
    api().prop_flat_map(|api| {
        (valid(api), prop::collection::vec(edit(), 0..3), damage())
            .prop_map(move |(body, edits, damage)| (api, render(body, &edits, &damage)))
    })
}

/// Header bytes as a client may send them: visible ASCII, blanks, obs-text, controls.
pub(crate) fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte =
        prop_oneof![6 => 0x21u8..0x7f, 1 => Just(b' '), 1 => Just(b'\t'), 1 => 0x80u8..=0xff, 1 => 0u8..0x20];
    // Long ones (about the 256-byte cap on ids) repeat a short pattern: cheaper to generate.
    let long = (prop::collection::vec(byte.clone(), 1..8), 245usize..262)
        .prop_map(|(pattern, n)| pattern.iter().cycle().take(n).copied().collect());
    prop_oneof![prop::collection::vec(byte, 0..12), long]
}

//! Python's text forms of template values, so a minijinja rendering prints what Jinja2 prints
//! under transformers: `json.dumps` for the `tojson` filter (transformers replaces Jinja's own,
//! HTML-escaping one with `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`), and `str()`/`repr()` for `{{ value }}` (`True`, `None`, `{'a': 1}`,
//! `1e+16`) where minijinja would print `true`, `none`, `{"a": 1}`.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// A JSON value as a template value (maps keep their key order).
pub(crate) fn to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => Value::from(items.iter().map(to_value).collect::<Vec<_>>()),
        serde_json::Value::Object(map) => {
            Value::from_pairs(map.iter().map(|(k, v)| (Value::from(k.as_str()), to_value(v))))
        }
    }
}

/// `json.dumps` options.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// The `tojson` filter of transformers: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, with its arguments positional or by keyword.
pub(crate) fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        match kwargs.get::<Option<Value>>(name)? {
            Some(v) => Ok(Some(v)),
            None => Ok(args.0.get(i).cloned()),
        }
    };
    let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => Some(" ".repeat(v.as_usize().unwrap_or(0))),
        },
    };
    let (item_sep, key_sep) = match arg(2, "separators")? {
        Some(v) if !v.is_none() => {
            let item = v.get_item_by_index(0)?;
            let key = v.get_item_by_index(1)?;
            match (item.as_str(), key.as_str()) {
                (Some(i), Some(k)) => (i.to_owned(), k.to_owned()),
                _ => return Err(Error::new(ErrorKind::InvalidOperation, "separators must be two strings")),
            }
        }
        // Python's defaults: ", " without indent, "," with it.
        _ => (if indent.is_some() { "," } else { ", " }.to_owned(), ": ".to_owned()),
    };
    let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let style = JsonStyle { ensure_ascii, indent, item_sep, key_sep, sort_keys };
    let mut out = String::new();
    write_json(&mut out, value, &style, 0)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(out: &mut String, v: &Value, style: &JsonStyle, depth: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, v, true),
        ValueKind::String => write_json_str(out, v.as_str().unwrap_or_default(), style.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_container(out, style, depth, ('[', ']'), &items, |out, item, d| {
                write_json(out, item, style, d)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if style.sort_keys {
                keys.sort_by_key(json_key);
            }
            write_container(out, style, depth, ('{', '}'), &keys, |out, key, d| {
                write_json_str(out, &json_key(key), style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_json(out, &v.get_item(key)?, style, d)
            })?;
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {kind} is not JSON serializable"),
            ));
        }
    }
    Ok(())
}

fn write_container(
    out: &mut String,
    style: &JsonStyle,
    depth: usize,
    (open, close): (char, char),
    items: &[Value],
    mut each: impl FnMut(&mut String, &Value, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        each(out, item, depth + 1)?;
    }
    if let Some(indent) = &style.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// A dict key as `json.dumps` writes it: strings as they are, `True` → `true`, `None` → `null`.
fn json_key(key: &Value) -> String {
    match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
        ValueKind::None => "null".to_owned(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_owned(),
        _ => {
            let mut s = String::new();
            write_number(&mut s, key, true);
            s
        }
    }
}

fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as Python prints it (`json` spells the non-finite floats differently from `repr`).
fn write_number(out: &mut String, v: &Value, json: bool) {
    if v.is_integer() {
        let _ = write!(out, "{v}");
        return;
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    out.push_str(&float_repr(f, json));
}

/// `repr(float)`: the shortest digits that round-trip, positional for exponents in [-4, 16),
/// scientific (`1e+16`, `1.5e-07`) outside, and always a `.0` on integral values.
pub(crate) fn float_repr(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN" } else { "nan" }.to_owned();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.to_owned() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// `str(value)` as Jinja2 prints `{{ value }}`; `None` when minijinja's own printing is right
/// (strings, undefined, objects without a Python form).
pub(crate) fn python_str(v: &Value) -> Option<String> {
    match v.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Seq | ValueKind::Map => {
            let mut out = String::new();
            write_repr(&mut out, v);
            Some(out)
        }
        _ => None,
    }
}

/// `repr(value)` for the values a chat template sees (containers print their items with it).
fn write_repr(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => write_number(out, v, false),
        ValueKind::String => write_str_repr(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key);
                out.push_str(": ");
                write_repr(out, &v.get_item(&key).unwrap_or_default());
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

/// `repr(str)`: single quotes unless the text holds a `'` and no `"`.
fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, ctx: serde_json::Value) -> String {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", tojson);
        env.set_formatter(|out, state, value| match python_str(value) {
            Some(s) => out.write_str(&s).map_err(|_| Error::new(ErrorKind::WriteFailure, "write")),
            None => minijinja::escape_formatter(out, state, value),
        });
        env.render_str(template, to_value(&ctx)).unwrap()
    }

    #[test]
    fn tojson_is_python_json_dumps() {
        let ctx = serde_json::json!({"x": {"b": 1, "a": [1.0, "é\"<>&\n", null, true]}});
        assert_eq!(render("{{ x|tojson }}", ctx.clone()), r#"{"b": 1, "a": [1.0, "é\"<>&\n", null, true]}"#);
        assert_eq!(
            render("{{ x|tojson(indent=2, sort_keys=true) }}", ctx.clone()),
            "{\n  \"a\": [\n    1.0,\n    \"é\\\"<>&\\n\",\n    null,\n    true\n  ],\n  \"b\": 1\n}"
        );
        assert_eq!(
            render("{{ x.a|tojson(ensure_ascii=true) }}", ctx.clone()),
            r#"[1.0, "\u00e9\"<>&\n", null, true]"#
        );
        assert_eq!(
            render("{{ x|tojson(separators=(',', ':')) }}", ctx),
            r#"{"b":1,"a":[1.0,"é\"<>&\n",null,true]}"#
        );
    }

    #[test]
    fn printed_values_are_python_str() {
        let ctx = serde_json::json!({"t": true, "n": null, "m": {"k": ["it's", 2.5, false]}, "f": 1e16});
        assert_eq!(
            render("{{ t }} {{ n }} {{ m }} {{ f }}", ctx),
            r#"True None {'k': ["it's", 2.5, False]} 1e+16"#
        );
    }

    #[test]
    fn floats_print_like_repr() {
        for (f, s) in
            [(1.0, "1.0"), (0.1, "0.1"), (1e-5, "1e-05"), (1.5e-7, "1.5e-07"), (123456.789, "123456.789")]
        {
            assert_eq!(float_repr(f, false), s);
        }
        assert_eq!(float_repr(1e22, false), "1e+22");
        assert_eq!(float_repr(f64::INFINITY, true), "Infinity");
    }
}

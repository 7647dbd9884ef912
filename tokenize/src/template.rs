//! A chat template compiled with minijinja configured like transformers' Jinja environment
//! (`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])`
//! plus its `tojson` filter and the `raise_exception` and `strftime_now` globals), with Python's
//! string methods (`.strip()`, `.startswith()`, `.items()`, … from minijinja-contrib) and
//! Python's printing of values.
//!
//! Known differences from Jinja2 that remain: methods minijinja-contrib does not implement, and
//! the `{% generation %}` block of transformers' `AssistantTracker`, which is kept as a plain
//! block (it only marks assistant tokens for training masks and prints nothing itself).

use std::fmt::Write as _;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::Map;

use crate::config::{SpecialTokens, TemplateSet};
use crate::error::LoadError;
use crate::python;

/// How SGLang hands a message's list-of-parts content to the template
/// (`detect_jinja_template_content_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContentFormat {
    /// The text parts joined with a space: the template expects a string.
    String,
    /// The list kept (`{"type": "text", "text": …}` parts): the template loops over it.
    OpenAi,
}

/// A compiled chat template (or a set of named ones).
#[derive(Debug)]
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
    has_tool_use: bool,
    content_format: ContentFormat,
    special: Map<String, serde_json::Value>,
}

impl ChatTemplate {
    /// Compiles every template of the set; one must be named `default`.
    pub(crate) fn compile(set: &TemplateSet, special: &SpecialTokens) -> Result<Self, LoadError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
        env.set_syntax(syntax.map_err(|e| template_error(&set.origin, "default", &e))?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", python::tojson);
        env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_function("strftime_now", |format: String| -> Result<String, Error> {
            let mut out = String::new();
            write!(out, "{}", jiff::Zoned::now().strftime(&format))
                .map_err(|_| Error::new(ErrorKind::InvalidOperation, "strftime_now: bad format"))?;
            Ok(out)
        });
        env.set_formatter(|out, state, value| match python::python_str(value) {
            Some(text) => {
                out.write_str(&text).map_err(|_| Error::new(ErrorKind::WriteFailure, "write failed"))
            }
            None => minijinja::escape_formatter(out, state, value),
        });
        let mut default_source = None;
        for (name, source) in &set.templates {
            let source = generation_blocks_as_plain_blocks(source);
            env.add_template_owned(name.clone(), source.clone())
                .map_err(|e| template_error(&set.origin, name, &e))?;
            if name == "default" {
                default_source = Some(source);
            }
        }
        let Some(default_source) = default_source else {
            return Err(LoadError::Template {
                origin: set.origin.clone(),
                reason: "several chat templates and none named \"default\"".into(),
            });
        };
        Ok(Self {
            env,
            has_tool_use: set.templates.iter().any(|(n, _)| n == "tool_use"),
            content_format: detect_content_format(&default_source),
            special: special.to_context(),
        })
    }

    /// How list content reaches this template.
    pub(crate) fn content_format(&self) -> ContentFormat {
        self.content_format
    }

    /// Renders `messages` with `add_generation_prompt=True`, as transformers'
    /// `apply_chat_template(messages, tools=tools, **kwargs)` does: the special tokens and `kwargs`
    /// are template variables, `tools` and `documents` are `None` when absent.
    pub(crate) fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&[serde_json::Value]>,
        kwargs: &Map<String, serde_json::Value>,
    ) -> Result<String, String> {
        let name = if tools.is_some() && self.has_tool_use { "tool_use" } else { "default" };
        let template = self.env.get_template(name).map_err(|e| e.to_string())?;
        let mut ctx = self.special.clone();
        ctx.extend(kwargs.iter().map(|(k, v)| (k.clone(), v.clone())));
        ctx.insert("messages".into(), messages.to_vec().into());
        ctx.insert("tools".into(), tools.map_or(serde_json::Value::Null, |t| t.to_vec().into()));
        ctx.insert("documents".into(), serde_json::Value::Null);
        ctx.insert("add_generation_prompt".into(), true.into());
        template.render(python::to_value(&serde_json::Value::Object(ctx))).map_err(|e| match e.kind() {
            // raise_exception: the template's own message, as Jinja2's TemplateError carries it.
            ErrorKind::InvalidOperation => e.detail().unwrap_or("invalid operation").to_owned(),
            _ => e.to_string(),
        })
    }
}

fn template_error(origin: &str, name: &str, e: &Error) -> LoadError {
    let origin = if name == "default" { origin.to_owned() } else { format!("{origin} (template {name:?})") };
    LoadError::Template { origin, reason: e.to_string() }
}

/// SGLang's detection: `openai` when the template mentions media or loops over a message's
/// `content` (`{% for part in message['content'] %}`, also `msg.content` and `m.content`), else
/// `string`. SGLang walks the Jinja AST; this scans the `{% for … in … %}` tags, which is the
/// same test on the templates models ship.
fn detect_content_format(source: &str) -> ContentFormat {
    if ["image", "audio", "video", "vision"].iter().any(|k| source.contains(k)) {
        return ContentFormat::OpenAi;
    }
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("%}") else { break };
        let tag = after[..end].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        if let Some(head) = tag.strip_prefix("for ")
            && let Some((_, iter)) = head.split_once(" in ")
        {
            let iter: String = iter.chars().filter(|c| !c.is_whitespace()).collect();
            let loops_content = ["message", "msg", "m"].iter().any(|var| {
                [format!("{var}['content']"), format!("{var}[\"content\"]"), format!("{var}.content")]
                    .iter()
                    .any(|access| iter.starts_with(access.as_str()))
            });
            if loops_content {
                return ContentFormat::OpenAi;
            }
        }
        rest = &after[end + 2..];
    }
    ContentFormat::String
}

/// `{% generation %}…{% endgeneration %}` (transformers' `AssistantTracker`) → a block that
/// always renders its body, keeping the tags' whitespace control.
fn generation_blocks_as_plain_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("%}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let left = if inner.starts_with('-') || inner.starts_with('+') { &inner[..1] } else { "" };
        let right = if inner.ends_with('-') || inner.ends_with('+') { &inner[inner.len() - 1..] } else { "" };
        let word = inner[left.len()..inner.len() - right.len()].trim();
        match word {
            "generation" => write!(out, "{{%{left} if true {right}%}}"),
            "endgeneration" => write!(out, "{{%{left} endif {right}%}}"),
            _ => write!(out, "{{%{inner}%}}"),
        }
        .unwrap_or_default();
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(source: &str) -> ChatTemplate {
        let set = TemplateSet { origin: "test".into(), templates: vec![("default".into(), source.into())] };
        let special = SpecialTokens { bos: Some("<s>".into()), ..SpecialTokens::default() };
        ChatTemplate::compile(&set, &special).unwrap()
    }

    fn render(source: &str, messages: serde_json::Value) -> Result<String, String> {
        let messages = messages.as_array().unwrap().clone();
        template(source).render(&messages, None, &Map::new())
    }

    #[test]
    fn jinja_like_transformers() {
        // trim_blocks + lstrip_blocks, loop controls, pycompat methods, bos_token, raise_exception.
        let source = "{{ bos_token }}\n{% for m in messages %}\n  {% if m.role == 'skip' %}{% continue %}{% endif %}\n  {{ m.content.strip().upper() }}|{{ m.role.startswith('us') }}\n{% endfor %}\n{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}";
        let out = render(
            source,
            serde_json::json!([{"role": "user", "content": " hi "}, {"role": "skip", "content": "x"}]),
        );
        assert_eq!(out.unwrap(), "<s>\n  HI|True\nrole=user;content= hi ;");
        let raising = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok";
        assert_eq!(
            render(raising, serde_json::json!([{"role": "system", "content": "s"}])).unwrap_err(),
            "System role not supported"
        );
    }

    #[test]
    fn generation_tags_keep_their_body_and_whitespace_control() {
        let source =
            "{% for m in messages %}A {%- generation -%} {{ m.content }} {%- endgeneration %}\n{% endfor %}";
        assert_eq!(render(source, serde_json::json!([{"role": "a", "content": "x"}])).unwrap(), "Ax");
        assert_eq!(generation_blocks_as_plain_blocks("{%+ generation %}"), "{%+ if true %}");
    }

    #[test]
    fn content_format_follows_loops_over_content() {
        assert_eq!(detect_content_format("{{ message['content'] }}"), ContentFormat::String);
        assert_eq!(
            detect_content_format("{%- for part in message['content'] -%}{{ part.text }}{% endfor %}"),
            ContentFormat::OpenAi
        );
        assert_eq!(
            detect_content_format("{% for c in msg.content | selectattr('type') %}{% endfor %}"),
            ContentFormat::OpenAi
        );
        assert_eq!(detect_content_format("{% for message in messages %}{% endfor %}"), ContentFormat::String);
        assert_eq!(detect_content_format("{{ 'image' }}"), ContentFormat::OpenAi);
    }

    #[test]
    fn syntax_errors_and_missing_default_are_load_errors() {
        let set =
            TemplateSet { origin: "f.jinja".into(), templates: vec![("default".into(), "{% if %}".into())] };
        assert!(matches!(
            ChatTemplate::compile(&set, &SpecialTokens::default()),
            Err(LoadError::Template { .. })
        ));
        let set = TemplateSet { origin: "cfg".into(), templates: vec![("rag".into(), "x".into())] };
        let err = ChatTemplate::compile(&set, &SpecialTokens::default()).unwrap_err();
        assert!(err.to_string().contains("default"), "{err}");
    }
}

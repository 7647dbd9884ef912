//! The files next to `tokenizer.json` that shape a chat prompt: the chat template
//! (`chat_template.jinja`, else `tokenizer_config.json`'s `chat_template`, as a string or as a
//! list of named templates) and the special-token strings a template may print (`bos_token`,
//! `eos_token`, … as strings or `AddedToken` objects).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::LoadError;

/// Where an explicit chat template comes from (`--chat-template`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplateSource {
    /// A Jinja file.
    File(PathBuf),
    /// The template text itself.
    Inline(String),
}

/// The special-token strings transformers passes to a chat template (its `special_tokens_map`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `bos_token`.
    pub bos: Option<String>,
    /// `eos_token`.
    pub eos: Option<String>,
    /// `unk_token`.
    pub unk: Option<String>,
    /// `sep_token`.
    pub sep: Option<String>,
    /// `pad_token`.
    pub pad: Option<String>,
    /// `cls_token`.
    pub cls: Option<String>,
    /// `mask_token`.
    pub mask: Option<String>,
    /// `additional_special_tokens`.
    pub additional: Vec<String>,
}

impl SpecialTokens {
    /// The template variables, as transformers names them.
    pub(crate) fn to_context(&self) -> Map<String, Value> {
        let mut ctx = Map::new();
        let named = [
            ("bos_token", &self.bos),
            ("eos_token", &self.eos),
            ("unk_token", &self.unk),
            ("sep_token", &self.sep),
            ("pad_token", &self.pad),
            ("cls_token", &self.cls),
            ("mask_token", &self.mask),
        ];
        for (name, token) in named {
            if let Some(t) = token {
                ctx.insert(name.into(), Value::String(t.clone()));
            }
        }
        if !self.additional.is_empty() {
            ctx.insert("additional_special_tokens".into(), self.additional.clone().into());
        }
        ctx
    }
}

/// The chat templates of a model: one, or several by name (transformers picks `tool_use` when
/// the request has tools and the model has one, else `default`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateSet {
    /// Where it came from, for messages.
    pub(crate) origin: String,
    /// `(name, source)`; a single template is named `default`.
    pub(crate) templates: Vec<(String, String)>,
}

/// What the directory of a `tokenizer.json` says about chat prompts.
#[derive(Debug, Default)]
pub(crate) struct ModelFiles {
    pub(crate) templates: Option<TemplateSet>,
    pub(crate) special: SpecialTokens,
}

/// Reads `tokenizer_config.json` (optional) and `chat_template.jinja` (optional) next to
/// `tokenizer_json`; an explicit template replaces both templates.
pub(crate) fn read(
    tokenizer_json: &Path,
    explicit: Option<&ChatTemplateSource>,
) -> Result<ModelFiles, LoadError> {
    let dir = tokenizer_json.parent().unwrap_or(Path::new("."));
    let config_path = dir.join("tokenizer_config.json");
    let config = match std::fs::read_to_string(&config_path) {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(o)) => Some(o),
            Ok(_) => return Err(config_error(&config_path, "not a JSON object")),
            Err(e) => return Err(config_error(&config_path, &format!("invalid JSON: {e}"))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(LoadError::Read { path: config_path, source }),
    };
    let mut files = ModelFiles::default();
    if let Some(config) = &config {
        files.special = special_tokens(config).map_err(|r| config_error(&config_path, &r))?;
    }
    files.templates = match explicit {
        Some(ChatTemplateSource::File(path)) => {
            let text = read_text(path)?;
            Some(TemplateSet {
                origin: path.display().to_string(),
                templates: vec![("default".into(), text)],
            })
        }
        Some(ChatTemplateSource::Inline(text)) => Some(TemplateSet {
            origin: "--chat-template".into(),
            templates: vec![("default".into(), text.clone())],
        }),
        None => {
            let jinja = dir.join("chat_template.jinja");
            if jinja.exists() {
                let text = read_text(&jinja)?;
                Some(TemplateSet {
                    origin: jinja.display().to_string(),
                    templates: vec![("default".into(), text)],
                })
            } else if let Some(config) = &config {
                config_templates(config, &config_path)?
            } else {
                None
            }
        }
    };
    Ok(files)
}

fn read_text(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: path.to_owned(), source })
}

fn config_error(path: &Path, reason: &str) -> LoadError {
    LoadError::Config { path: path.to_owned(), reason: reason.to_owned() }
}

/// `chat_template` as a string, or as `[{"name": …, "template": …}, …]`.
fn config_templates(config: &Map<String, Value>, path: &Path) -> Result<Option<TemplateSet>, LoadError> {
    let origin = path.display().to_string();
    match config.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            Ok(Some(TemplateSet { origin, templates: vec![("default".into(), s.clone())] }))
        }
        Some(Value::Array(list)) => {
            let mut templates = Vec::with_capacity(list.len());
            for item in list {
                let name = item.get("name").and_then(Value::as_str);
                let template = item.get("template").and_then(Value::as_str);
                match (name, template) {
                    (Some(n), Some(t)) => templates.push((n.to_owned(), t.to_owned())),
                    _ => {
                        return Err(config_error(
                            path,
                            "chat_template: each entry needs a string name and template",
                        ));
                    }
                }
            }
            Ok(Some(TemplateSet { origin, templates }))
        }
        Some(_) => Err(config_error(path, "chat_template must be a string or a list of named templates")),
    }
}

fn special_tokens(config: &Map<String, Value>) -> Result<SpecialTokens, String> {
    let token = |name: &str| -> Result<Option<String>, String> {
        match config.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                token_text(v).map(Some).ok_or_else(|| format!("{name}: expected a string or an AddedToken"))
            }
        }
    };
    let additional = match config.get("additional_special_tokens") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|v| {
                token_text(v)
                    .ok_or_else(|| "additional_special_tokens: expected strings or AddedTokens".to_owned())
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("additional_special_tokens must be a list".into()),
    };
    Ok(SpecialTokens {
        bos: token("bos_token")?,
        eos: token("eos_token")?,
        unk: token("unk_token")?,
        sep: token("sep_token")?,
        pad: token("pad_token")?,
        cls: token("cls_token")?,
        mask: token("mask_token")?,
        additional,
    })
}

/// A token as a string or as `{"content": "…", "__type": "AddedToken", …}`.
fn token_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn config_template_forms_and_added_token_objects() {
        let dir = dir_with(&[(
            "tokenizer_config.json",
            r#"{"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
                "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
                "eos_token": "</s>", "additional_special_tokens": ["<x>"]}"#,
        )]);
        let files = read(&dir.path().join("tokenizer.json"), None).unwrap();
        let set = files.templates.unwrap();
        assert_eq!(set.templates, vec![("default".into(), "D".into()), ("tool_use".into(), "T".into())]);
        assert_eq!(files.special.bos.as_deref(), Some("<s>"));
        assert_eq!(files.special.eos.as_deref(), Some("</s>"));
        assert_eq!(files.special.additional, ["<x>"]);
    }

    #[test]
    fn jinja_file_wins_over_config_and_explicit_wins_over_both() {
        let dir =
            dir_with(&[("tokenizer_config.json", r#"{"chat_template": "C"}"#), ("chat_template.jinja", "J")]);
        let json = dir.path().join("tokenizer.json");
        assert_eq!(read(&json, None).unwrap().templates.unwrap().templates[0].1, "J");
        let explicit = ChatTemplateSource::Inline("E".into());
        assert_eq!(read(&json, Some(&explicit)).unwrap().templates.unwrap().templates[0].1, "E");
    }

    #[test]
    fn bad_configs_name_the_file() {
        for text in [
            "{",
            "[]",
            r#"{"chat_template": 5}"#,
            r#"{"bos_token": 5}"#,
            r#"{"chat_template": [{"name": "x"}]}"#,
        ] {
            let dir = dir_with(&[("tokenizer_config.json", text)]);
            let err = read(&dir.path().join("tokenizer.json"), None).unwrap_err();
            assert!(matches!(err, LoadError::Config { .. }), "{text}: {err}");
            assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
        }
        let missing = ChatTemplateSource::File("/nonexistent/t.jinja".into());
        let err = read(Path::new("/nonexistent/tokenizer.json"), Some(&missing)).unwrap_err();
        assert!(matches!(err, LoadError::Read { .. }) && err.to_string().contains("t.jinja"), "{err}");
    }
}

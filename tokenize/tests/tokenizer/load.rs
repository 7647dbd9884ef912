//! Loading `tokenizer.json` with its `tokenizer_config.json`, and the errors for bad files.

use std::path::Path;

use infera_proto::types::Api;
use infera_tokenize::{ChatTemplateSource, LoadError, Outcome, Rendered, Tokenizer, fixture};
use serde_json::json;

use crate::support::{body, byte_level};

fn model_dir(config: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    byte_level().save(dir.path().join("tokenizer.json"), false).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.path().join("tokenizer_config.json"), config).unwrap();
    }
    dir
}

fn chat(t: &Tokenizer) -> Rendered {
    let b = body(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}));
    t.render(Api::ChatCompletions, &b).unwrap()
}

#[test]
fn loads_tokenizer_json_and_the_config_template() {
    let config = json!({"chat_template": fixture::CHATML, "bos_token": {"__type": "AddedToken", "content": "<|endoftext|>"}});
    let dir = model_dir(Some(&config.to_string()));
    let t = Tokenizer::load(&dir.path().join("tokenizer.json"), None).unwrap();
    assert_eq!(
        chat(&t),
        Rendered::Chat {
            text: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n".into(),
            assistant_prefix: None
        }
    );
    // The loaded tokenizer encodes like the one it was saved from.
    let text = fixture::text(&mut fixture::Lcg::new(1), 200);
    assert_eq!(t.encode(&text, false).unwrap(), byte_level().encode(text.as_str(), false).unwrap().get_ids());
    // An explicit template wins.
    let explicit = ChatTemplateSource::Inline("{{ messages[0].content }}!".into());
    let t = Tokenizer::load(&dir.path().join("tokenizer.json"), Some(&explicit)).unwrap();
    assert_eq!(chat(&t), Rendered::Chat { text: "hi!".into(), assistant_prefix: None });
}

#[test]
fn a_template_file_is_read_and_a_missing_template_leaves_chat_skipped() {
    let dir = model_dir(None);
    let json = dir.path().join("tokenizer.json");
    let file = dir.path().join("t.jinja");
    std::fs::write(&file, "[{{ messages[0].content }}]").unwrap();
    let t = Tokenizer::load(&json, Some(&ChatTemplateSource::File(file))).unwrap();
    assert_eq!(chat(&t), Rendered::Chat { text: "[hi]".into(), assistant_prefix: None });
    let t = Tokenizer::load(&json, None).unwrap();
    assert!(!t.has_chat_template());
    assert!(matches!(
        t.tokenize(Api::Completions, &body(json!({"prompt": "x"})), None),
        Ok(Outcome::Tokens(_))
    ));
}

#[test]
fn bad_files_are_typed_errors_naming_the_file() {
    let err = Tokenizer::load(Path::new("/nonexistent/tokenizer.json"), None).unwrap_err();
    assert!(
        matches!(err, LoadError::Read { .. }) && err.to_string().contains("/nonexistent/tokenizer.json"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tokenizer.json");
    std::fs::write(&json, r#"{"model": {"type": "Nonsense"}}"#).unwrap();
    let err = Tokenizer::load(&json, None).unwrap_err();
    assert!(
        matches!(err, LoadError::Tokenizer { .. }) && err.to_string().contains("tokenizer.json"),
        "{err}"
    );

    let dir = model_dir(Some(r#"{"chat_template": "{% for %}"}"#));
    let err = Tokenizer::load(&dir.path().join("tokenizer.json"), None).unwrap_err();
    assert!(
        matches!(err, LoadError::Template { .. }) && err.to_string().contains("tokenizer_config.json"),
        "{err}"
    );

    let dir = model_dir(Some("not json"));
    let err = Tokenizer::load(&dir.path().join("tokenizer.json"), None).unwrap_err();
    assert!(matches!(err, LoadError::Config { .. }), "{err}");
}

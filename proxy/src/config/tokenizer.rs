//! The tokenizer flags: `--tokenizer` (every model), `--model-tokenizer MODEL=PATH` (one model
//! each), how they encode, and the render-parity probes → [`crate::tokenizers::Tokenizers`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Args as ClapArgs;
use infera_proto::types::ModelName;
use infera_tokenize::{ChatTemplateSource, EncoderChoice, LoadError};

use crate::tokenizers::{LoadSettings, Loaded, Source, Tokenizers};

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Tokenizer")]
pub(super) struct TokenizerArgs {
    /// A Hugging Face tokenizer.json for every model without its own --model-tokenizer: the
    /// proxy then counts input tokens exactly and knows the prompt's token ids (the chat template
    /// comes from chat_template.jinja or tokenizer_config.json next to it). Unset: each model's
    /// tokenizer is its --model-tokenizer, else the one its workers' /model_info names when that
    /// path is on this host, else none (input tokens estimated from the text).
    #[arg(long, env = "INFERA_PROXY_TOKENIZER", value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// A Jinja chat template to use instead of the one next to --tokenizer (the file given to
    /// SGLang's --chat-template).
    #[arg(long, env = "INFERA_PROXY_CHAT_TEMPLATE", value_name = "FILE", requires = "tokenizer")]
    chat_template: Option<PathBuf>,
    /// One model's tokenizer, `MODEL=PATH`: a model directory (tokenizer.json,
    /// tokenizer_config.json, optionally chat_template.jinja) or a tokenizer.json. Repeat it,
    /// or give a comma-separated list, for several models; it wins over --tokenizer.
    #[arg(
        long = "model-tokenizer",
        env = "INFERA_PROXY_MODEL_TOKENIZERS",
        value_name = "MODEL=PATH",
        value_delimiter = ','
    )]
    model_tokenizers: Vec<ModelTokenizer>,
    /// Memory for the last prompt of each session, so a new turn encodes only its new text
    /// (0 turns the cache off); each model's tokenizer has its own.
    #[arg(long, env = "INFERA_PROXY_TOKENIZER_CACHE_BYTES", default_value_t = 64 << 20)]
    tokenizer_cache_bytes: usize,
    /// Which BPE encodes: `auto` uses the fast one (kitoken) when it gives the ids of Hugging Face
    /// `tokenizers` on a probe at start, else `tokenizers`; `reference` always uses `tokenizers`.
    #[arg(long, env = "INFERA_PROXY_TOKENIZER_ENCODER", value_enum, default_value_t = EncoderArg::Auto)]
    tokenizer_encoder: EncoderArg,
    /// While the fast encoder runs, encode the first prompt and then one in N again with
    /// `tokenizers`, off the request's path, and compare; a difference turns the fast encoder off
    /// (`infera_proxy_tokenizer_checks_total`). 0: no checks.
    #[arg(long, env = "INFERA_PROXY_TOKENIZER_CHECK_EVERY", value_name = "N", default_value_t = 1000)]
    tokenizer_check_every: u64,
    /// How often each worker of a model with a tokenizer is probed again for render parity (its
    /// /v1/tokenize on fixed conversations against the proxy's; a new worker at once). A model
    /// with a worker that renders apart routes its chat prompts on load. 0: no probes.
    #[arg(
        long,
        env = "INFERA_PROXY_RENDER_PARITY_INTERVAL_MS",
        value_name = "MS",
        default_value_t = 300_000
    )]
    render_parity_interval_ms: u64,
}

/// `--tokenizer-encoder`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum EncoderArg {
    Auto,
    Reference,
}

/// One `--model-tokenizer MODEL=PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ModelTokenizer {
    model: ModelName,
    path: PathBuf,
}

impl FromStr for ModelTokenizer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (model, path) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected MODEL=PATH"))?;
        let (model, path) = (model.trim(), path.trim());
        if model.is_empty() || path.is_empty() {
            return Err(format!("{s:?}: expected MODEL=PATH, both non-empty"));
        }
        Ok(Self { model: ModelName::new(model), path: PathBuf::from(path) })
    }
}

/// The tokenizer flags cannot be used (the proxy does not start).
#[derive(Debug, thiserror::Error)]
pub enum TokenizerFlagError {
    /// A file does not load.
    #[error("{flag}: {source}")]
    Load {
        /// The flag, with its model for `--model-tokenizer`.
        flag: String,
        /// Why.
        source: LoadError,
    },
    /// One model given twice.
    #[error("--model-tokenizer: model {0} is given twice")]
    Twice(ModelName),
}

impl TokenizerArgs {
    /// The render-parity period (`None`: never).
    pub(super) fn render_parity_interval(&self) -> Option<Duration> {
        (self.render_parity_interval_ms > 0).then(|| Duration::from_millis(self.render_parity_interval_ms))
    }

    /// Loads the tokenizers the flags name (bad files stop the proxy with their flag).
    pub(super) fn load(self) -> Result<Tokenizers, TokenizerFlagError> {
        let settings = LoadSettings {
            encoder: match self.tokenizer_encoder {
                EncoderArg::Auto => EncoderChoice::Auto,
                EncoderArg::Reference => EncoderChoice::Reference,
            },
            cache_bytes: self.tokenizer_cache_bytes,
            check_every: self.tokenizer_check_every,
        };
        let every = match self.tokenizer {
            Some(path) => {
                let template = self.chat_template.map(ChatTemplateSource::File);
                let tokenizer = settings
                    .load(&path, template.as_ref())
                    .map_err(|source| TokenizerFlagError::Load { flag: "--tokenizer".into(), source })?;
                Some(Loaded { tokenizer: tokenizer.into(), source: Source::EveryModel(path) })
            }
            None => None,
        };
        let mut per_model = HashMap::new();
        for ModelTokenizer { model, path } in self.model_tokenizers {
            if per_model.contains_key(&model) {
                return Err(TokenizerFlagError::Twice(model));
            }
            let flag = format!("--model-tokenizer {model}");
            let tokenizer =
                settings.load(&path, None).map_err(|source| TokenizerFlagError::Load { flag, source })?;
            per_model.insert(model, Loaded { tokenizer: tokenizer.into(), source: Source::ModelFlag(path) });
        }
        Ok(Tokenizers::new(every, per_model, settings))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use clap::Parser as _;
    use infera_tokenize::{EncoderKind, Tokenizer, fixture};

    use crate::config::{Args, Config, ConfigError};

    use super::*;

    fn config(argv: &[&str]) -> Result<Config, ConfigError> {
        Config::try_from(Args::try_parse_from([&["infera-proxy"], argv].concat()).unwrap())
    }

    #[test]
    fn bad_tokenizer_files_are_config_errors() {
        let err = config(&["--tokenizer", "/nonexistent/tokenizer.json"]).unwrap_err();
        assert!(matches!(err, ConfigError::Tokenizer(_)), "{err}");
        assert!(err.to_string().contains("--tokenizer: /nonexistent/tokenizer.json"), "{err}");
        let err = config(&["--model-tokenizer", "m=/nonexistent/dir"]).unwrap_err();
        assert!(err.to_string().contains("--model-tokenizer m: /nonexistent/dir"), "{err}");
        // A chat template needs --tokenizer; MODEL=PATH needs both.
        assert!(Args::try_parse_from(["infera-proxy", "--chat-template", "t.jinja"]).is_err());
        for bad in ["m", "=dir", "m="] {
            assert!(Args::try_parse_from(["infera-proxy", "--model-tokenizer", bad]).is_err(), "{bad}");
        }
        let m = config(&[]).unwrap();
        assert!(
            m.tokenizers.get(&ModelName::new("m")).is_none() && m.tokenizers.configured().next().is_none()
        );
    }

    #[test]
    fn model_tokenizers_are_per_model_and_win_over_the_tokenizer_for_every_model() {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let every = fixture::write_model_dir(dirs[0].path(), 300).unwrap();
        let a_json = fixture::write_model_dir(dirs[1].path(), 400).unwrap();
        fixture::write_model_dir(dirs[2].path(), 500).unwrap();
        let (a_dir, b_dir) = (dirs[1].path().to_str().unwrap(), dirs[2].path().to_str().unwrap());
        // A directory or its tokenizer.json; repeated, or a list as the environment gives it.
        let c = config(&[
            "--tokenizer",
            every.to_str().unwrap(),
            "--model-tokenizer",
            &format!("a={}", a_json.display()),
            "--model-tokenizer",
            &format!("b={b_dir}"),
        ])
        .unwrap();
        let text = fixture::text(&mut fixture::Lcg::new(9), 60);
        let count = |model: &str| {
            c.tokenizers.get(&ModelName::new(model)).unwrap().encode(&text, false).unwrap().len()
        };
        let expected = |dir: &std::path::Path| {
            Tokenizer::load(&dir.join("tokenizer.json"), None).unwrap().encode(&text, false).unwrap().len()
        };
        assert_eq!(count("a"), expected(dirs[1].path()));
        assert_eq!(count("b"), expected(dirs[2].path()));
        assert_eq!(count("other"), expected(dirs[0].path()), "--tokenizer serves the rest");
        assert!(count("a") != count("b") && count("b") != count("other"));
        assert!(c.tokenizers.get(&ModelName::new("a")).unwrap().has_chat_template(), "from the directory");

        let list = format!("a={a_dir},b={b_dir}");
        let args = Args::try_parse_from(["infera-proxy", "--model-tokenizer", &list]).unwrap();
        let c = Config::try_from(args).unwrap();
        assert_eq!(c.tokenizers.configured().count(), 2);
        assert!(c.tokenizers.get(&ModelName::new("other")).is_none());
        let twice = config(&["--model-tokenizer", &format!("a={a_dir},a={b_dir}")]).unwrap_err();
        assert!(twice.to_string().contains("model a is given twice"), "{twice}");
    }

    #[test]
    fn the_encoder_is_the_fast_one_unless_the_reference_is_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let json = fixture::write_model_dir(dir.path(), 300).unwrap();
        let load = |extra: &[&str]| -> Arc<Tokenizer> {
            let argv = [&["--tokenizer", json.to_str().unwrap()], extra].concat();
            config(&argv).unwrap().tokenizers.get(&ModelName::new("any")).unwrap()
        };
        let fast = load(&[]);
        assert!(matches!(fast.encoder(), EncoderKind::Fast { .. }));
        // The first prompt is checked, then one in 1,000 (the default).
        assert!(fast.check_due());
        assert!((0..999).all(|_| !fast.check_due()));
        assert!(fast.check_due());
        assert!(!load(&["--tokenizer-check-every", "0"]).check_due());
        let reference = load(&["--tokenizer-encoder", "reference"]);
        assert_eq!(reference.encoder(), EncoderKind::Reference(infera_tokenize::ReferenceReason::AskedFor));
        assert!(!reference.check_due(), "nothing to check without the fast encoder");
        let err = Args::try_parse_from(["infera-proxy", "--tokenizer-encoder", "fastest"]).unwrap_err();
        assert!(err.to_string().contains("auto") && err.to_string().contains("reference"), "{err}");
    }
}

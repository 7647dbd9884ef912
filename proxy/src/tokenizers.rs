//! The tokenizer of each served model: a request looks its model's up ([`Tokenizers::get`], one
//! map lookup, no lock held past it) and is routed on load when there is none, as without any.
//!
//! Sources, first that applies: `--model-tokenizer MODEL=PATH` for that model; `--tokenizer` for
//! every model (as before per-model tokenizers); else what the model's first listed worker names
//! in SGLang's `GET /model_info` (`tokenizer_path`, else `model_path`:
//! python/sglang/srt/entrypoints/http_server.py), when that path is on the proxy's host (a shared
//! model volume), loaded off the request path by [`discover`] as soon as the worker is listed.
//! Each model's source is logged once.

pub mod discover;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use infera_proto::types::{ModelName, WorkerId};
use infera_tokenize::{ChatTemplateSource, EncoderChoice, LoadError, Tokenizer};

/// How every tokenizer is loaded, whatever its source.
#[derive(Clone, Copy, Debug)]
pub struct LoadSettings {
    /// `--tokenizer-encoder`.
    pub encoder: EncoderChoice,
    /// `--tokenizer-cache-bytes`, per tokenizer.
    pub cache_bytes: usize,
    /// `--tokenizer-check-every`.
    pub check_every: u64,
}

impl LoadSettings {
    /// Loads `path` (a `tokenizer.json`, or a directory holding one) with `template` or the chat
    /// template next to it.
    pub fn load(&self, path: &Path, template: Option<&ChatTemplateSource>) -> Result<Tokenizer, LoadError> {
        let json = tokenizer_json(path);
        Ok(Tokenizer::load_with(&json, template, self.encoder)?
            .with_session_cache(self.cache_bytes)
            .with_checks(self.check_every))
    }
}

/// The `tokenizer.json` a path names: the file itself, or the one in the directory.
pub fn tokenizer_json(path: &Path) -> PathBuf {
    if path.is_dir() { path.join("tokenizer.json") } else { path.to_owned() }
}

/// Where a model's tokenizer came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--model-tokenizer MODEL=PATH`.
    ModelFlag(PathBuf),
    /// `--tokenizer`, for every model.
    EveryModel(PathBuf),
    /// The path a worker's `/model_info` names, found on this host.
    Worker {
        /// The worker asked.
        worker: WorkerId,
        /// The `tokenizer.json` loaded.
        path: PathBuf,
    },
}

/// A tokenizer and where it came from.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// Its source.
    pub source: Source,
}

/// What asking a model's workers gave.
#[derive(Clone, Debug)]
enum Found {
    Loaded(Loaded),
    /// No tokenizer (the path is not on this host, the worker did not answer, the files do not
    /// load); asked again after [`discover::RETRY`].
    Missing {
        at: Instant,
    },
}

/// Every model's tokenizer.
#[derive(Debug)]
pub struct Tokenizers {
    every: Option<Loaded>,
    per_model: HashMap<ModelName, Loaded>,
    /// Filled by [`discover`] for the models with neither.
    found: RwLock<HashMap<ModelName, Found>>,
    settings: LoadSettings,
}

impl Tokenizers {
    /// The tokenizers given on the command line.
    pub fn new(every: Option<Loaded>, per_model: HashMap<ModelName, Loaded>, settings: LoadSettings) -> Self {
        Self { every, per_model, found: RwLock::default(), settings }
    }

    /// No tokenizer from the command line (tests, and a proxy that finds them all from workers).
    pub fn none(settings: LoadSettings) -> Self {
        Self::new(None, HashMap::new(), settings)
    }

    /// `model`'s tokenizer, if it has one (the request path: one map lookup and an `Arc` clone).
    pub fn get(&self, model: &ModelName) -> Option<Arc<Tokenizer>> {
        self.with(model, |l| l.tokenizer.clone())
    }

    /// `model`'s tokenizer and its source.
    pub fn loaded(&self, model: &ModelName) -> Option<Loaded> {
        self.with(model, Loaded::clone)
    }

    /// `f` of `model`'s tokenizer, with the lock (if any) held for `f` only.
    fn with<T>(&self, model: &ModelName, f: impl FnOnce(&Loaded) -> T) -> Option<T> {
        if let Some(l) = self.per_model.get(model).or(self.every.as_ref()) {
            return Some(f(l));
        }
        match self.found.read().expect("tokenizers lock").get(model) {
            Some(Found::Loaded(l)) => Some(f(l)),
            _ => None,
        }
    }

    /// The tokenizers given on the command line, to log at start (`None`: `--tokenizer`).
    pub fn configured(&self) -> impl Iterator<Item = (Option<&ModelName>, &Loaded)> {
        self.every.iter().map(|l| (None, l)).chain(self.per_model.iter().map(|(m, l)| (Some(m), l)))
    }

    /// How a tokenizer found from a worker is loaded.
    pub fn settings(&self) -> LoadSettings {
        self.settings
    }

    /// Whether `model`'s workers are to be asked for its tokenizer now: it has none from the
    /// command line, and was never asked, or found none more than `retry` ago.
    pub fn due(&self, model: &ModelName, retry: Duration) -> bool {
        if self.every.is_some() || self.per_model.contains_key(model) {
            return false;
        }
        match self.found.read().expect("tokenizers lock").get(model) {
            None => true,
            Some(Found::Loaded(_)) => false,
            Some(Found::Missing { at }) => at.elapsed() >= retry,
        }
    }

    /// Whether `model`'s workers were asked before.
    pub fn asked(&self, model: &ModelName) -> bool {
        self.found.read().expect("tokenizers lock").contains_key(model)
    }

    /// Records a tokenizer found for `model`.
    pub fn found(&self, model: &ModelName, loaded: Loaded) {
        self.found.write().expect("tokenizers lock").insert(model.clone(), Found::Loaded(loaded));
    }

    /// Records that `model`'s workers gave no tokenizer, at `at`.
    pub fn missing(&self, model: &ModelName, at: Instant) {
        self.found.write().expect("tokenizers lock").insert(model.clone(), Found::Missing { at });
    }
}

#[cfg(test)]
mod tests {
    use infera_tokenize::fixture;

    use super::*;

    const SETTINGS: LoadSettings =
        LoadSettings { encoder: EncoderChoice::Reference, cache_bytes: 0, check_every: 0 };

    fn loaded(dir: &Path, vocab: usize, source: impl Fn(PathBuf) -> Source) -> Loaded {
        let json = fixture::write_model_dir(dir, vocab).unwrap();
        let tokenizer = Arc::new(SETTINGS.load(dir, None).unwrap());
        Loaded { tokenizer, source: source(json) }
    }

    #[test]
    fn each_model_gets_its_own_tokenizer_then_every_models_then_its_workers() {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let (a, b, c) = (ModelName::new("a"), ModelName::new("b"), ModelName::new("c"));
        let own = loaded(dirs[0].path(), 300, Source::ModelFlag);
        let worker = WorkerId::new("w");
        let from_worker = loaded(dirs[2].path(), 500, |path| Source::Worker { worker: worker.clone(), path });
        let retry = Duration::from_secs(60);

        // Per model only: other models are found from their workers.
        let map = Tokenizers::new(None, HashMap::from([(a.clone(), own.clone())]), SETTINGS);
        assert!(Arc::ptr_eq(&map.get(&a).unwrap(), &own.tokenizer));
        assert!(map.get(&b).is_none());
        assert!(!map.due(&a, retry), "a flag's tokenizer is never replaced");
        assert!(map.due(&b, retry) && !map.asked(&b));
        map.missing(&b, Instant::now());
        assert!(map.asked(&b) && !map.due(&b, retry), "asked again only after the retry");
        assert!(map.due(&b, Duration::ZERO));
        map.found(&b, from_worker.clone());
        assert!(Arc::ptr_eq(&map.get(&b).unwrap(), &from_worker.tokenizer));
        assert_eq!(map.loaded(&b).unwrap().source, from_worker.source);
        assert!(!map.due(&b, Duration::ZERO));
        assert!(map.get(&c).is_none());

        // --tokenizer serves every model without its own, and no worker is asked.
        let every = loaded(dirs[1].path(), 400, Source::EveryModel);
        let map = Tokenizers::new(Some(every.clone()), HashMap::from([(a.clone(), own.clone())]), SETTINGS);
        assert!(Arc::ptr_eq(&map.get(&a).unwrap(), &own.tokenizer));
        assert!(Arc::ptr_eq(&map.get(&c).unwrap(), &every.tokenizer));
        assert!(!map.due(&c, Duration::ZERO));
        assert_eq!(map.configured().count(), 2);
        // The two tokenizers count the same text apart (vocabularies of 300 and 400).
        let text = fixture::text(&mut fixture::Lcg::new(5), 50);
        let count = |t: &Tokenizer| t.encode(&text, false).unwrap().len();
        assert_ne!(count(&map.get(&a).unwrap()), count(&map.get(&c).unwrap()));
    }
}

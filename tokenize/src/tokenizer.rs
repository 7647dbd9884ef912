//! [`Tokenizer`]: a `tokenizer.json` with its chat template, turning request bodies into the
//! token ids SGLang prefills.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use infera_proto::types::Api;
use serde_json::{Map, Value};

use crate::boundary::{Boundaries, Cut};
use crate::chat;
use crate::config::{self, ChatTemplateSource, SpecialTokens, TemplateSet};
use crate::encoder::{Encoder, EncoderChoice, EncoderKind};
use crate::error::{LoadError, TokenizeError};
use crate::prompt::{Prompt, Skip};
use crate::request;
use crate::responses;
use crate::session::{CacheStats, SessionCache};
use crate::template::ChatTemplate;

mod check;

pub use check::Verdict;

/// Why a chat prompt is ambiguous: the proxy cannot know which rendering SGLang uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ambiguity {
    /// The template raised on the messages as sent or with the system messages coalesced.
    TemplateRaises(String),
    /// The messages as sent (inline system support) and with the system messages coalesced
    /// into one leading message (no inline system support) render differently.
    SystemPlacement,
}

/// A request's prompt, ready to encode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendered {
    /// Token ids the client gave.
    Ids(Vec<u32>),
    /// Text SGLang encodes with the tokenizer's special tokens (completions, `/generate`).
    Text(String),
    /// A rendered chat prompt, encoded without adding special tokens (the template has them).
    Chat {
        /// The template's output.
        text: String,
        /// With `continue_final_message`: the final assistant text, encoded after the prompt.
        assistant_prefix: Option<String>,
    },
    /// Route on load: the rendering depends on what the proxy cannot see.
    Ambiguous(Ambiguity),
    /// Not tokenized, by design.
    Skipped(Skip),
}

/// Whether a prompt's ids came partly from the session cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheUse {
    /// No session key, no cache, or not a chat prompt.
    NotAsked,
    /// This many leading ids were reused from the session's previous turn.
    Hit(usize),
    /// Encoded whole.
    Miss,
}

/// The token ids of a prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// What SGLang prefills.
    pub ids: Arc<[u32]>,
    /// How the session cache was used.
    pub cache: CacheUse,
}

/// What tokenizing a request gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The prompt's token ids.
    Tokens(Tokens),
    /// Route on load.
    Ambiguous(Ambiguity),
    /// Not tokenized, by design.
    Skipped(Skip),
}

/// A Hugging Face tokenizer with its chat template and a session cache.
#[derive(Debug)]
pub struct Tokenizer {
    encoder: Encoder,
    template: Option<ChatTemplate>,
    bos_id: Option<u32>,
    boundaries: Boundaries,
    cache: Option<Mutex<SessionCache>>,
    /// Check one prompt in this many against the reference while the fast encoder runs (0: none).
    check_every: u64,
    checks_due: AtomicU64,
    /// Session-cache entries of another generation are not reused: a check that finds wrong ids
    /// moves it on, so that ids cached before are not lent out again.
    cache_generation: AtomicU64,
}

impl Tokenizer {
    /// Loads `tokenizer_json`; the chat template is `chat_template` when given, else
    /// `chat_template.jinja` or `tokenizer_config.json`'s `chat_template` next to it (a
    /// tokenizer without one tokenizes completions and `/generate` only). It encodes with the
    /// fast encoder where that one agrees with `tokenizers` ([`EncoderChoice::Auto`]).
    pub fn load(
        tokenizer_json: &Path,
        chat_template: Option<&ChatTemplateSource>,
    ) -> Result<Self, LoadError> {
        Self::load_with(tokenizer_json, chat_template, EncoderChoice::Auto)
    }

    /// [`Tokenizer::load`] with the encoder `choice`.
    pub fn load_with(
        tokenizer_json: &Path,
        chat_template: Option<&ChatTemplateSource>,
        choice: EncoderChoice,
    ) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(tokenizer_json)
            .map_err(|source| LoadError::Read { path: tokenizer_json.to_owned(), source })?;
        let backend: tokenizers::Tokenizer = text.parse().map_err(|e: tokenizers::Error| {
            LoadError::Tokenizer { path: tokenizer_json.to_owned(), reason: e.to_string() }
        })?;
        let files = config::read(tokenizer_json, chat_template)?;
        Self::build(backend, files.templates.as_ref(), files.special, choice)
    }

    /// A tokenizer from parts (tests, benchmarks): `chat_template` is the template text; the
    /// encoder is [`EncoderChoice::Auto`] (see [`Tokenizer::with_encoder`]).
    pub fn new(
        backend: tokenizers::Tokenizer,
        chat_template: Option<&str>,
        special: SpecialTokens,
    ) -> Result<Self, LoadError> {
        let set = chat_template.map(|t| TemplateSet {
            origin: "chat template".into(),
            templates: vec![("default".into(), t.to_owned())],
        });
        Self::build(backend, set.as_ref(), special, EncoderChoice::Auto)
    }

    fn build(
        mut backend: tokenizers::Tokenizer,
        templates: Option<&TemplateSet>,
        special: SpecialTokens,
        choice: EncoderChoice,
    ) -> Result<Self, LoadError> {
        // As transformers' encode without truncation or padding arguments.
        let _ = backend.with_truncation(None);
        backend.with_padding(None);
        let template = templates.map(|t| ChatTemplate::compile(t, &special)).transpose()?;
        let bos_id = special.bos.as_deref().and_then(|b| backend.token_to_id(b));
        let boundaries = Boundaries::of(&backend);
        let encoder = Encoder::new(backend, choice);
        Ok(Self {
            encoder,
            template,
            bos_id,
            boundaries,
            cache: None,
            check_every: 0,
            checks_due: AtomicU64::new(0),
            cache_generation: AtomicU64::new(0),
        })
    }

    /// The same tokenizer with the encoder `choice`.
    pub fn with_encoder(mut self, choice: EncoderChoice) -> Self {
        self.encoder = Encoder::new(self.encoder.into_reference(), choice);
        self
    }

    /// Which encoder runs, and why the reference if it is the reference.
    pub fn encoder(&self) -> EncoderKind {
        self.encoder.kind()
    }

    /// The ids of a `continue_final_message` assistant text, as they follow the prompt: encoded
    /// with special tokens, without a leading `bos`.
    fn assistant_prefix_ids(
        &self,
        prefix: &str,
        encode: impl Fn(&str, bool) -> Result<Vec<u32>, TokenizeError>,
    ) -> Result<Vec<u32>, TokenizeError> {
        let mut extra = encode(prefix, true)?;
        if extra.first().is_some_and(|&first| Some(first) == self.bos_id) {
            extra.remove(0);
        }
        Ok(extra)
    }

    /// Keeps the last prompt of each session, up to `capacity_bytes` in all (0: no cache).
    pub fn with_session_cache(mut self, capacity_bytes: usize) -> Self {
        self.cache = (capacity_bytes > 0).then(|| Mutex::new(SessionCache::new(capacity_bytes)));
        self
    }

    /// Whether chat requests can be rendered.
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// The Hugging Face tokenizer (the reference encoder).
    pub fn backend(&self) -> &tokenizers::Tokenizer {
        self.encoder.reference()
    }

    /// The session cache's counters (all zero without a cache).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.as_ref().map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).stats()).unwrap_or_default()
    }

    /// The prompt of a request body, rendered but not encoded.
    pub fn render(&self, api: Api, body: &Map<String, Value>) -> Result<Rendered, TokenizeError> {
        let input = match request::parse(api, body)? {
            Prompt::Ids(ids) => return Ok(Rendered::Ids(ids)),
            Prompt::Text(text) => return Ok(Rendered::Text(text)),
            Prompt::Skip(skip) => return Ok(Rendered::Skipped(skip)),
            Prompt::Chat(input) => input,
        };
        let Some(template) = &self.template else { return Ok(Rendered::Skipped(Skip::NoChatTemplate)) };
        let coalesced = input.coalesces_system.then(|| responses::coalesce_system(&input.messages));
        let Some(coalesced) = coalesced.filter(|c| *c != input.messages) else {
            return Ok(match chat::render(template, &input, &input.messages)? {
                Ok(r) => Rendered::Chat { text: r.text, assistant_prefix: r.assistant_prefix },
                Err(skip) => Rendered::Skipped(skip),
            });
        };
        // SGLang renders one of the two placements depending on its version and its probe of
        // the template; the proxy only answers when both agree.
        let rendered = |messages: &[Value]| match chat::render(template, &input, messages) {
            Err(TokenizeError::Template(message)) => Err(Ambiguity::TemplateRaises(message)),
            other => Ok(other),
        };
        let (inline, merged) = match (rendered(&input.messages), rendered(&coalesced)) {
            (Ok(a), Ok(b)) => (a?, b?),
            (Err(a), _) | (_, Err(a)) => return Ok(Rendered::Ambiguous(a)),
        };
        Ok(match (inline, merged) {
            (Ok(a), Ok(b)) if a == b => Rendered::Chat { text: a.text, assistant_prefix: a.assistant_prefix },
            (Ok(_), Ok(_)) => Rendered::Ambiguous(Ambiguity::SystemPlacement),
            (Err(skip), _) | (_, Err(skip)) => Rendered::Skipped(skip),
        })
    }

    /// The token ids SGLang prefills for a request body; a chat prompt of a `session` reuses the
    /// ids of that session's previous prompt where the texts agree.
    pub fn tokenize(
        &self,
        api: Api,
        body: &Map<String, Value>,
        session: Option<&str>,
    ) -> Result<Outcome, TokenizeError> {
        let tokens = |ids: Vec<u32>, cache| Outcome::Tokens(Tokens { ids: ids.into(), cache });
        Ok(match self.render(api, body)? {
            Rendered::Ids(ids) => tokens(ids, CacheUse::NotAsked),
            Rendered::Text(text) => tokens(self.encode(&text, true)?, CacheUse::NotAsked),
            Rendered::Chat { text, assistant_prefix } => {
                let (mut ids, cache) = self.encode_chat(text, session)?;
                if let Some(prefix) = assistant_prefix {
                    let extra = self.assistant_prefix_ids(&prefix, |t, add| self.encode(t, add))?;
                    let mut all = ids.to_vec();
                    all.extend(extra);
                    ids = all.into();
                }
                Outcome::Tokens(Tokens { ids, cache })
            }
            Rendered::Ambiguous(a) => Outcome::Ambiguous(a),
            Rendered::Skipped(s) => Outcome::Skipped(s),
        })
    }

    /// Encodes `text` as transformers' `tokenizer.encode(text, add_special_tokens=…)`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizeError> {
        self.encoder.encode(text, add_special_tokens)
    }

    /// A rendered chat prompt's ids (no special tokens added), through the session cache.
    fn encode_chat(
        &self,
        text: String,
        session: Option<&str>,
    ) -> Result<(Arc<[u32]>, CacheUse), TokenizeError> {
        let (Some(cache), Some(session)) = (&self.cache, session) else {
            return Ok((self.encode(&text, false)?.into(), CacheUse::NotAsked));
        };
        if self.boundaries.is_empty() {
            return Ok((self.encode(&text, false)?.into(), CacheUse::NotAsked));
        }
        let lock = || cache.lock().unwrap_or_else(|e| e.into_inner());
        let generation = self.cache_generation.load(Ordering::Acquire);
        let reuse = lock().lookup(session, &text, generation);
        let (start, mut ids, mut cuts) = match reuse {
            Some(r) => (r.start, r.ids, r.cuts),
            None => (0, Vec::new(), Vec::new()),
        };
        let reused = ids.len();
        let (suffix_ids, suffix_cuts) = self.encode_with_cuts(&text[start..], start, reused)?;
        ids.extend(suffix_ids);
        cuts.extend(suffix_cuts);
        let ids: Arc<[u32]> = ids.into();
        lock().store(session, text, ids.clone(), cuts, generation);
        Ok((ids, if start > 0 { CacheUse::Hit(reused) } else { CacheUse::Miss }))
    }

    /// Encodes `text` (no special tokens added) and finds its cut points, shifted by `base`
    /// bytes and `first` tokens.
    fn encode_with_cuts(
        &self,
        text: &str,
        base: usize,
        first: usize,
    ) -> Result<(Vec<u32>, Vec<Cut>), TokenizeError> {
        let encoded = self.encoder.encode_with_offsets(text)?;
        let cuts = self.boundaries.cuts(text, &encoded.ids, &encoded.offsets, base, first);
        Ok((encoded.ids, cuts))
    }
}

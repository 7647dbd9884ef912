//! API keys (`--api-keys FILE`): when set, every generation request (and `/v1/models`) needs
//! `Authorization: Bearer <key>`; a missing or unknown key is `401 invalid_api_key`, a key over
//! its tokens-per-second limit `429` with `Retry-After`. Only the key's name ever appears in
//! logs, traces and metric labels. The file is read at start and again on SIGHUP; a file that
//! does not load keeps the keys in force.
//!
//! The file is TOML, keys by the SHA-256 of their text (so the file holds no secret):
//!
//! ```toml
//! [[keys]]
//! name = "team-a"
//! sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! tokens_per_second = 20000   # optional: prompt tokens per second, with a burst of one second
//! service_class = "batch"      # optional: the class of its requests without x-infera-service-class
//! ```
//!
//! or, only when its first line says so, plain text, one key per line (`#` comments), each
//! named `key-<first 8 hex of its hash>`:
//!
//! ```text
//! # infera-api-keys: plain
//! sk-9d41c2…
//! ```
//!
//! Anything else is an error (fail closed): a TOML file with one typo is refused, never read as
//! a list of keys whose lines are its own text. A file that others may read is loaded with a
//! warning, which names what a reader gets (the keys themselves, or their hashes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// Unreadable.
    #[error("--api-keys {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not a key file.
    #[error("--api-keys {path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the entry.
        problem: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    keys: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    sha256: String,
    tokens_per_second: Option<f64>,
    service_class: Option<String>,
}

/// One key's name and limit, and its bucket.
#[derive(Debug)]
struct Key {
    name: Arc<str>,
    limit: Option<Bucket>,
    /// The service class of its requests that name none.
    class: Option<Arc<str>>,
}

/// A token bucket: `rate` tokens a second, holding at most one second's worth.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(rate: f64, now: Instant) -> Self {
        Self { rate, state: Mutex::new((rate, now)) }
    }

    /// Takes `tokens` at `now`, or says how long until the bucket has them (it may go below
    /// zero by one request: a request larger than a second's worth passes once it is full).
    fn take(&self, tokens: f64, now: Instant) -> Result<(), Duration> {
        let mut state = self.state.lock().expect("bucket lock");
        let (level, at) = *state;
        let level = (level + now.saturating_duration_since(at).as_secs_f64() * self.rate).min(self.rate);
        if level < tokens.min(self.rate) {
            *state = (level, now);
            return Err(Duration::from_secs_f64((tokens.min(self.rate) - level) / self.rate));
        }
        *state = (level - tokens, now);
        Ok(())
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Bearer`, or a key the file does not list.
    Unauthorized,
    /// The key is over its limit; retry after this long.
    RateLimited {
        /// The key's name.
        name: Arc<str>,
        /// When the bucket will have the tokens.
        retry_after: Duration,
    },
}

/// A request's key, once identified: its name (for logs, traces and metrics) and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's name.
    pub name: Arc<str>,
    /// The service class of its requests that name none (`service_class` in the file).
    pub class: Option<Arc<str>>,
    hash: [u8; 32],
}

impl Caller {
    /// The tenant its requests' own ids are scoped to on the engines: `key-` and the first 8 hex
    /// digits of the key's hash (never the key; the same for every request of the key).
    pub fn tenant(&self) -> Arc<str> {
        let h = &self.hash;
        format!("key-{:02x}{:02x}{:02x}{:02x}", h[0], h[1], h[2], h[3]).into()
    }
}

/// The keys in force, by the SHA-256 of their text.
#[derive(Debug, Default)]
pub struct KeySet {
    keys: HashMap<[u8; 32], Key>,
}

fn sha256(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Why a file that lists no key is refused.
const NO_KEY: &str = "lists no key (every request would be refused)";

/// The first line that makes a key file one key per line.
pub const PLAIN_HEADER: &str = "# infera-api-keys: plain";

/// A key file's format, as its text declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    /// TOML `[[keys]]` entries with SHA-256 hashes (the file holds no secret).
    Hashed,
    /// One key per line, after [`PLAIN_HEADER`] (the file holds the keys themselves).
    Plain,
}

impl KeyFormat {
    /// The format `text` declares: plain only when its first line is [`PLAIN_HEADER`].
    pub fn of(text: &str) -> Self {
        let first = text.lines().next().unwrap_or_default().trim();
        if first == PLAIN_HEADER { Self::Plain } else { Self::Hashed }
    }
}

impl KeySet {
    /// Parses a key file's text: TOML `[[keys]]`, or one key per line after [`PLAIN_HEADER`].
    ///
    /// # Errors
    /// A precise problem naming the entry, or the TOML error (with its line) of a file that is
    /// not valid TOML: a broken file is never read as something else.
    pub fn parse(text: &str, now: Instant) -> Result<Self, String> {
        let mut keys = HashMap::new();
        if KeyFormat::of(text) == KeyFormat::Hashed {
            let table = toml::from_str::<toml::Table>(text).map_err(|e| {
                format!("not a valid key file: {e} (a file of one key per line starts with `{PLAIN_HEADER}`)")
            })?;
            if table.is_empty() {
                return Err(NO_KEY.to_owned());
            }
            if !table.contains_key("keys") {
                return Err("TOML without [[keys]] entries".to_owned());
            }
            let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
            for (i, e) in file.keys.into_iter().enumerate() {
                let hash = hex32(&e.sha256).ok_or_else(|| format!("keys[{i}].sha256: not 64 hex digits"))?;
                if e.name.trim().is_empty() {
                    return Err(format!("keys[{i}].name: must not be empty"));
                }
                let limit = match e.tokens_per_second {
                    None => None,
                    Some(r) if r.is_finite() && r > 0.0 => Some(Bucket::new(r, now)),
                    Some(r) => {
                        return Err(format!("keys[{i}].tokens_per_second: {r} is not a positive rate"));
                    }
                };
                let class = match e.service_class {
                    None => None,
                    Some(c) if infera_proto::types::ServiceClassName::is_valid(&c) => Some(c.into()),
                    Some(c) => {
                        return Err(format!("keys[{i}].service_class: {c:?} is not 1–64 of [A-Za-z0-9._-]"));
                    }
                };
                if keys.insert(hash, Key { name: e.name.into(), limit, class }).is_some() {
                    return Err(format!("keys[{i}]: the same key twice"));
                }
            }
        } else {
            for line in text.lines().skip(1).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                let hash = sha256(line);
                let name = format!("key-{:02x}{:02x}{:02x}{:02x}", hash[0], hash[1], hash[2], hash[3]);
                keys.insert(hash, Key { name: name.into(), limit: None, class: None });
            }
        }
        if keys.is_empty() {
            return Err(NO_KEY.to_owned());
        }
        Ok(Self { keys })
    }

    /// Reads and parses `path`, warning when others may read it.
    ///
    /// # Errors
    /// When it cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Self, KeysError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| KeysError::Read { path: path.into(), source })?;
        let set = Self::parse(&text, Instant::now())
            .map_err(|problem| KeysError::Invalid { path: path.into(), problem })?;
        let mode = std::fs::metadata(path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()));
        if let Ok(mode) = mode
            && let Some(exposed) = exposure(KeyFormat::of(&text), mode)
        {
            tracing::warn!(path = %path.display(), mode = format!("{:o}", mode & 0o777), "--api-keys: {exposed}");
        }
        Ok(set)
    }

    /// The key an `Authorization` header names, if the file lists it.
    pub fn identify(&self, authorization: Option<&[u8]>) -> Result<Caller, Refusal> {
        let key =
            authorization.and_then(|v| std::str::from_utf8(v).ok()).and_then(|v| v.strip_prefix("Bearer "));
        self.listed(key)
    }

    /// The key a request presents, if the file lists it: `Authorization: Bearer <key>`, else
    /// `x-api-key: <key>`, the header Anthropic's clients send.
    pub fn identify_request(&self, headers: &http::HeaderMap) -> Result<Caller, Refusal> {
        self.identify(headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes()))
            .or_else(|_| self.listed(headers.get("x-api-key").and_then(|v| v.to_str().ok())))
    }

    fn listed(&self, key: Option<&str>) -> Result<Caller, Refusal> {
        let hash = key
            .map(|k| sha256(k.trim()))
            .filter(|h| self.keys.contains_key(h))
            .ok_or(Refusal::Unauthorized)?;
        let key = &self.keys[&hash];
        Ok(Caller { name: key.name.clone(), class: key.class.clone(), hash })
    }

    /// Charges `caller`'s limit with a request of `tokens` prompt tokens at `now`.
    pub fn charge(&self, caller: &Caller, tokens: u64, now: Instant) -> Result<(), Refusal> {
        let Some(bucket) = self.keys.get(&caller.hash).and_then(|k| k.limit.as_ref()) else { return Ok(()) };
        bucket
            .take(tokens as f64, now)
            .map_err(|retry_after| Refusal::RateLimited { name: caller.name.clone(), retry_after })
    }

    #[cfg(test)]
    fn check(&self, authorization: Option<&[u8]>, tokens: u64, now: Instant) -> Result<Arc<str>, Refusal> {
        let caller = self.identify(authorization)?;
        self.charge(&caller, tokens, now)?;
        Ok(caller.name)
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds none (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// What a file of `format` with permission bits `mode` gives away to others, if anything: a
/// plain file readable by its group or by anyone hands out the keys; a hashed one readable by
/// anyone hands out hashes to guess weak keys against.
fn exposure(format: KeyFormat, mode: u32) -> Option<&'static str> {
    match format {
        KeyFormat::Plain if mode & 0o044 != 0 => {
            Some("the file holds the API keys themselves and others may read it (chmod 600)")
        }
        KeyFormat::Hashed if mode & 0o004 != 0 => Some(
            "anyone on the host may read the keys' hashes, enough to test guesses offline (chmod 640 or 600)",
        ),
        _ => None,
    }
}

/// The keys in force and the file they came from, swapped whole on reload.
#[derive(Debug)]
pub struct Keys {
    path: PathBuf,
    set: RwLock<Arc<KeySet>>,
}

impl Keys {
    /// Loads `path`.
    ///
    /// # Errors
    /// When the file does not load (the proxy does not start).
    pub fn load(path: PathBuf) -> Result<Self, KeysError> {
        let set = KeySet::load(&path)?;
        Ok(Self { path, set: RwLock::new(Arc::new(set)) })
    }

    /// The keys in force.
    pub fn get(&self) -> Arc<KeySet> {
        self.set.read().expect("keys lock").clone()
    }

    /// Reads the file again (SIGHUP); on an error the keys in force stay. Whether it loaded.
    pub fn reload(&self) -> bool {
        match KeySet::load(&self.path) {
            Ok(set) => {
                tracing::info!(keys = set.len(), path = %self.path.display(), "API keys reloaded");
                *self.set.write().expect("keys lock") = Arc::new(set);
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "API keys not reloaded; the keys in force stay");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;

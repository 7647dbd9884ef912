//! The proxies' tokens (`--router-tokens FILE`): which bearer token proves which identity. Read at
//! start (a file that does not load stops control, exit 64) and again on SIGHUP (a file that does
//! not load is logged and the tokens in force stay).
//!
//! The file is TOML; each entry names an identity and its token, by its SHA-256 (the file then
//! holds no secret) or as the token itself (for a Kubernetes Secret that the proxies mount too):
//!
//! ```toml
//! [[tokens]]
//! identity = "proxy-a"
//! sha256 = "…64 hex digits…"     # printf %s "$TOKEN" | sha256sum
//!
//! [[tokens]]
//! identity = "proxy-b"
//! token = "…at least 16 characters…"
//! ```
//!
//! An identity may have several tokens (a rotation: the new one is added, the proxies move to it,
//! the old one is removed, each step a SIGHUP); one token names one identity.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::identity::Identity;

/// The shortest token taken as `token = …`.
pub const MIN_TOKEN_BYTES: usize = 16;

/// A tokens file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// Unreadable.
    #[error("--router-tokens {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not a tokens file, or an entry that cannot be used.
    #[error("--router-tokens {path}: {problem}")]
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
    #[serde(default)]
    tokens: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    identity: String,
    sha256: Option<String>,
    token: Option<String>,
}

/// The tokens in force: identity by the SHA-256 of the token.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TokenTable {
    by_hash: HashMap<[u8; 32], Identity>,
}

impl TokenTable {
    /// Parses a tokens file's `text` (`path` names it in errors).
    ///
    /// # Errors
    /// Text that is not a tokens file, an entry that cannot be used, or no entry at all.
    pub fn parse(text: &str, path: &Path) -> Result<Self, TokensError> {
        let invalid = |problem: String| TokensError::Invalid { path: path.to_owned(), problem };
        let file: File = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if file.tokens.is_empty() {
            return Err(invalid("lists no [[tokens]]: every Router call would be refused".into()));
        }
        let mut by_hash = HashMap::new();
        for (i, e) in file.tokens.into_iter().enumerate() {
            let at = |what: String| invalid(format!("tokens[{i}] ({:?}): {what}", e.identity));
            let identity = Identity::new(&e.identity).map_err(|err| at(err.to_string()))?;
            let hash = match (&e.sha256, &e.token) {
                (Some(hex), None) => {
                    parse_hex(hex).ok_or_else(|| at("sha256 must be 64 hex digits".into()))?
                }
                (None, Some(token)) => {
                    if token.len() < MIN_TOKEN_BYTES || token.chars().any(char::is_whitespace) {
                        return Err(at(format!(
                            "a token has at least {MIN_TOKEN_BYTES} characters and no spaces (e.g. openssl rand -hex 32)"
                        )));
                    }
                    digest(token.as_bytes())
                }
                _ => return Err(at("give exactly one of sha256 and token".into())),
            };
            if let Some(other) = by_hash.insert(hash, identity.clone())
                && other != identity
            {
                return Err(at(format!(
                    "the same token is listed for {other} too: one token names one identity"
                )));
            }
        }
        Ok(Self { by_hash })
    }

    /// The identity `token` proves, if any.
    pub fn identify(&self, token: &[u8]) -> Option<&Identity> {
        // By the token's hash: what a lookup's timing could tell is about a SHA-256, not the token.
        self.by_hash.get(&digest(token))
    }

    /// How many tokens it lists.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether it lists none (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The tokens file and the table in force, replaced by a reload that loads.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    table: RwLock<Arc<TokenTable>>,
}

impl Tokens {
    /// Reads `path`.
    ///
    /// # Errors
    /// A file that cannot be read or used.
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, TokensError> {
        let path = path.into();
        let table = read(&path)?;
        Ok(Self { path, table: RwLock::new(Arc::new(table)) })
    }

    /// Reads the file again; on an error the tokens in force stay.
    ///
    /// # Errors
    /// A file that cannot be read or used.
    pub fn reload(&self) -> Result<usize, TokensError> {
        let table = read(&self.path)?;
        let n = table.len();
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        Ok(n)
    }

    /// The table in force.
    pub fn current(&self) -> Arc<TokenTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn read(path: &Path) -> Result<TokenTable, TokensError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| TokensError::Read { path: path.to_owned(), source })?;
    TokenTable::parse(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn parse(text: &str) -> Result<TokenTable, String> {
        TokenTable::parse(text, Path::new("tokens.toml")).map_err(|e| e.to_string())
    }

    fn hex(token: &str) -> String {
        digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_token_names_its_identity_by_hash_or_as_itself() {
        let text = format!(
            "[[tokens]]\nidentity = \"proxy-a\"\nsha256 = \"{}\"\n\
             [[tokens]]\nidentity = \"proxy-b\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\n\
             [[tokens]]\nidentity = \"proxy-a\"\ntoken = \"a-second-token-for-a-rotation\"\n",
            hex(TOKEN_A)
        );
        let t = parse(&text).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.identify(TOKEN_A.as_bytes()).unwrap().as_str(), "proxy-a");
        assert_eq!(t.identify(b"bbbbbbbbbbbbbbbbbbbb").unwrap().as_str(), "proxy-b");
        assert_eq!(t.identify(b"a-second-token-for-a-rotation").unwrap().as_str(), "proxy-a");
        assert_eq!(t.identify(b"bbbbbbbbbbbbbbbbbbb"), None, "a prefix is no token");
        assert_eq!(t.identify(b""), None);
    }

    #[test]
    fn entries_that_cannot_be_used_are_named() {
        for (text, needle) in [
            ("", "lists no [[tokens]]"),
            ("[[tokens]]\nidentity = \"a\"\n", "exactly one of sha256 and token"),
            ("[[tokens]]\nidentity = \"a\"\nsha256 = \"00\"\n", "64 hex digits"),
            ("[[tokens]]\nidentity = \"a\"\ntoken = \"short\"\n", "at least 16"),
            ("[[tokens]]\nidentity = \"\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\n", "must not be empty"),
            ("[[tokens]]\nidentity = \"a b\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\n", "no spaces"),
            (
                "[[tokens]]\nidentity = \"a\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\nname = \"x\"\n",
                "unknown field",
            ),
            (
                "[[tokens]]\nidentity = \"a\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\n\
                 [[tokens]]\nidentity = \"b\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\n",
                "listed for a too",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle) && e.contains("tokens.toml"), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_reload_that_fails_keeps_the_tokens_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        std::fs::write(&path, format!("[[tokens]]\nidentity = \"a\"\ntoken = \"{TOKEN_A}\"\n")).unwrap();
        let tokens = Tokens::load(&path).unwrap();
        std::fs::write(&path, "not toml [").unwrap();
        assert!(tokens.reload().is_err());
        assert!(tokens.current().identify(TOKEN_A.as_bytes()).is_some(), "the old table stays");
        std::fs::write(&path, "[[tokens]]\nidentity = \"b\"\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\n").unwrap();
        assert_eq!(tokens.reload().unwrap(), 1);
        assert!(tokens.current().identify(TOKEN_A.as_bytes()).is_none(), "a removed token is refused");
        assert!(Tokens::load(dir.path().join("missing")).is_err());
    }
}

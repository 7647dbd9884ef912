//! Proxy tokens for control's Router, made at run time: each a random token in a file of its own
//! (what a proxy's `--control-token-file` reads), and control's tokens file listing them by their
//! SHA-256 (its `--router-tokens`), rewritten on every change so that a test can rotate a token
//! and send SIGHUP. Client certificates are [`crate::tls`]'s; [`crate::ControlSpec::router_tokens`],
//! [`crate::ControlSpec::tls`], [`crate::ProxySpec::control_token`] and
//! [`crate::ProxySpec::control_tls`] give either to the binaries.

use std::path::PathBuf;

use rand::Rng;
use sha2::{Digest, Sha256};

/// One proxy's token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The identity control names its bearer.
    pub identity: String,
    /// The token itself.
    pub token: String,
    /// The file holding it (a proxy's `--control-token-file`).
    pub file: PathBuf,
}

impl Token {
    /// A proxy's flags to show it (`--control-token-file`).
    pub fn proxy_flags(&self) -> Vec<String> {
        vec!["--control-token-file".to_owned(), self.file.display().to_string()]
    }

    /// `msg` carrying this token (`authorization: Bearer …`), for a raw Router call.
    ///
    /// # Panics
    /// Never for a token made here (hex digits).
    pub fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        req.metadata_mut().insert("authorization", format!("Bearer {}", self.token).parse().expect("hex"));
        req
    }
}

/// Control's tokens file and the tokens it lists (the directory goes on drop).
#[derive(Debug)]
pub struct RouterTokens {
    dir: tempfile::TempDir,
    tokens: Vec<Token>,
    issued: usize,
}

impl Default for RouterTokens {
    fn default() -> Self {
        Self::new()
    }
}

impl RouterTokens {
    /// No tokens yet (control's file is written with the first).
    ///
    /// # Panics
    /// When the directory cannot be made.
    pub fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("a directory"), tokens: Vec::new(), issued: 0 }
    }

    /// Control's tokens file (`--router-tokens`).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("router-tokens.toml")
    }

    /// A new random token for `identity` (beside any it has), listed in control's file from now
    /// on (a running control reads it on SIGHUP).
    ///
    /// # Panics
    /// When a file cannot be written.
    pub fn issue(&mut self, identity: &str) -> Token {
        self.issued += 1;
        let bytes: [u8; 24] = rand::rng().random();
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let file = self.dir.path().join(format!("{identity}-{}.token", self.issued));
        std::fs::write(&file, format!("{token}\n")).expect("the token file");
        let issued = Token { identity: identity.to_owned(), token, file };
        self.tokens.push(issued.clone());
        self.write();
        issued
    }

    /// `token` is no longer listed (a running control forgets it on SIGHUP).
    pub fn revoke(&mut self, token: &Token) {
        self.tokens.retain(|t| t != token);
        self.write();
    }

    fn write(&self) {
        let mut text = String::new();
        for t in &self.tokens {
            let hash: String =
                Sha256::digest(t.token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
            text.push_str(&format!("[[tokens]]\nidentity = {:?}\nsha256 = \"{hash}\"\n\n", t.identity));
        }
        // Written whole, then moved over the old one: a control reading it never sees half a file.
        let next = self.dir.path().join("router-tokens.toml.next");
        std::fs::write(&next, text).expect("the tokens file");
        std::fs::rename(&next, self.path()).expect("the tokens file");
    }
}

/// A proxy's API keys file (`--api-keys`) of named tenants, each with a random key made here
/// (the directory goes on drop).
#[derive(Debug)]
pub struct ApiKeys {
    dir: tempfile::TempDir,
    keys: Vec<(String, String)>,
}

impl ApiKeys {
    /// A file naming `tenants`, each with a new random key.
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn new(tenants: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a directory");
        let keys: Vec<(String, String)> = tenants
            .iter()
            .map(|name| {
                let bytes: [u8; 24] = rand::rng().random();
                ((*name).to_owned(), bytes.iter().map(|b| format!("{b:02x}")).collect())
            })
            .collect();
        let mut text = String::new();
        for (name, key) in &keys {
            let hash: String = Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
            text.push_str(&format!("[[keys]]\nname = {name:?}\nsha256 = \"{hash}\"\n\n"));
        }
        let this = Self { dir, keys };
        std::fs::write(this.path(), text).expect("the API keys file");
        this
    }

    /// The file (a proxy's `--api-keys`).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("api-keys.toml")
    }

    /// The key of `tenant`.
    ///
    /// # Panics
    /// When the file does not name it.
    pub fn key(&self, tenant: &str) -> &str {
        &self.keys.iter().find(|(n, _)| n == tenant).expect("a tenant of the file").1
    }
}

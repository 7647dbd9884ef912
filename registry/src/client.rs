//! How a part reaches etcd: its endpoints and, for a secured etcd, TLS (the CA that verifies
//! etcd's certificate, a client certificate for mutual TLS) and an etcd user whose password is
//! read from a file.
//!
//! [`EtcdConfig::new`] checks the combination without touching a file: security over a plain
//! `http://` endpoint is refused (no silent downgrade). [`EtcdConfig::check_files`] reads the
//! files once, at start; [`connect`] reads them again for every connection, so a rotated
//! certificate or password is used from the next reconnection on.

mod files;

use std::path::PathBuf;
use std::time::Duration;

pub use files::EtcdConfigError;

use crate::RegistryError;

/// The etcd security settings of a part, as its flags give them (all optional).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    /// CA bundle (PEM) that verifies etcd's server certificate; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM) shown to an etcd started with `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (PEM).
    pub key: Option<PathBuf>,
    /// The etcd user (with `password_file`); without one, an etcd with auth enabled takes the
    /// client certificate's common name as the user.
    pub user: Option<String>,
    /// The file holding the user's password (one line).
    pub password_file: Option<PathBuf>,
}

impl EtcdSecurity {
    /// The flags that are set, by name.
    fn given(&self) -> Vec<&'static str> {
        let set = [
            ("--etcd-ca", self.ca.is_some()),
            ("--etcd-cert", self.cert.is_some()),
            ("--etcd-key", self.key.is_some()),
            ("--etcd-user", self.user.is_some()),
            ("--etcd-password-file", self.password_file.is_some()),
        ];
        set.iter().filter(|(_, on)| *on).map(|(name, _)| *name).collect()
    }

    /// The same settings as command-line flags (for a child process, e.g. the control `up`
    /// starts).
    pub fn flags(&self) -> Vec<String> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let values = [
            ("--etcd-ca", path(&self.ca)),
            ("--etcd-cert", path(&self.cert)),
            ("--etcd-key", path(&self.key)),
            ("--etcd-user", self.user.clone()),
            ("--etcd-password-file", path(&self.password_file)),
        ];
        values.into_iter().filter_map(|(f, v)| Some([f.to_owned(), v?])).flatten().collect()
    }
}

/// A client certificate and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// An etcd user whose password is in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdUser {
    /// The user name.
    pub name: String,
    /// The file holding the password.
    pub password_file: PathBuf,
}

/// Where etcd is and how to reach it: checked, cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    /// TLS: every endpoint is `https://`.
    tls: bool,
    ca: Option<PathBuf>,
    identity: Option<ClientIdentity>,
    user: Option<EtcdUser>,
}

impl EtcdConfig {
    /// Checks that `security` goes with `endpoints`: a certificate goes with its key, a user
    /// with its password file, and any of them only with `https://` endpoints (nothing is sent
    /// to a plain `http://` etcd that a secured one would need). Reads no file.
    pub fn new(endpoints: Vec<String>, security: EtcdSecurity) -> Result<Self, EtcdConfigError> {
        let given = security.given();
        if endpoints.is_empty() && !given.is_empty() {
            return Err(EtcdConfigError::NoEndpoints { flags: given.join(", ") });
        }
        let https = |e: &String| e.starts_with("https://");
        if !given.is_empty()
            && let Some(plain) = endpoints.iter().find(|e| !https(e))
        {
            return Err(EtcdConfigError::Plaintext { endpoint: plain.clone(), flags: given.join(", ") });
        }
        let tls = endpoints.iter().any(https);
        if tls && let Some(plain) = endpoints.iter().find(|e| !https(e)) {
            return Err(EtcdConfigError::MixedSchemes { endpoint: plain.clone() });
        }
        let identity = match (security.cert, security.key) {
            (Some(cert), Some(key)) => Some(ClientIdentity { cert, key }),
            (None, None) => None,
            _ => return Err(EtcdConfigError::HalfIdentity),
        };
        let user = match (security.user, security.password_file) {
            (Some(name), _) if name.trim().is_empty() => return Err(EtcdConfigError::EmptyUser),
            (Some(name), Some(password_file)) => Some(EtcdUser { name, password_file }),
            (None, None) => None,
            _ => return Err(EtcdConfigError::HalfUser),
        };
        Ok(Self { endpoints, tls, ca: security.ca, identity, user })
    }

    /// Plain endpoints, no credentials (a test etcd; or an `https://` etcd whose certificate
    /// the system's roots verify).
    pub fn plain(endpoints: Vec<String>) -> Self {
        let tls = endpoints.iter().all(|e| e.starts_with("https://")) && !endpoints.is_empty();
        Self { endpoints, tls, ca: None, identity: None, user: None }
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The user this part authenticates as with a password (`None`: none, or the client
    /// certificate's common name).
    pub fn user(&self) -> Option<&str> {
        self.user.as_ref().map(|u| u.name.as_str())
    }

    /// The settings as given, e.g. to pass them on as flags.
    pub fn security(&self) -> EtcdSecurity {
        EtcdSecurity {
            ca: self.ca.clone(),
            cert: self.identity.as_ref().map(|i| i.cert.clone()),
            key: self.identity.as_ref().map(|i| i.key.clone()),
            user: self.user.as_ref().map(|u| u.name.clone()),
            password_file: self.user.as_ref().map(|u| u.password_file.clone()),
        }
    }

    /// Reads and checks every file (what a part does at start, to fail with the file's name).
    pub fn check_files(&self) -> Result<(), EtcdConfigError> {
        self.options().map(drop)
    }

    /// The client options, the files read now.
    fn options(&self) -> Result<etcd_client::ConnectOptions, EtcdConfigError> {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3));
        if self.tls {
            options = options.with_tls(files::tls(self.ca.as_deref(), self.identity.as_ref())?);
        }
        if let Some(user) = &self.user {
            let password = files::password(&user.password_file)?;
            // Tokens expire (etcd's --auth-token-ttl): a call refused for an expired one
            // authenticates again once and is retried.
            options = options.with_user(user.name.clone(), password).with_auto_token_refresh(true);
        }
        Ok(options)
    }
}

impl From<Vec<String>> for EtcdConfig {
    fn from(endpoints: Vec<String>) -> Self {
        Self::plain(endpoints)
    }
}

impl From<String> for EtcdConfig {
    fn from(endpoint: String) -> Self {
        Self::plain(vec![endpoint])
    }
}

impl From<&EtcdConfig> for EtcdConfig {
    fn from(config: &EtcdConfig) -> Self {
        config.clone()
    }
}

/// Connects to etcd (the files read again). With a user, the password is checked now; without
/// one, etcd is not contacted until the first call.
pub async fn connect(etcd: &EtcdConfig) -> Result<etcd_client::Client, RegistryError> {
    let options = etcd.options()?;
    Ok(etcd_client::Client::connect(&etcd.endpoints, Some(options)).await?)
}

/// Connects and asks etcd for its status, which needs a TLS handshake that etcd accepts and,
/// with a user, the password; it needs no role. A part that only writes (the registrar) checks
/// its access so at start.
pub async fn reach(etcd: &EtcdConfig) -> Result<etcd_client::Client, RegistryError> {
    let mut client = connect(etcd).await?;
    client.status().await?;
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security(flags: &[&str]) -> EtcdSecurity {
        let has = |f: &str| flags.contains(&f);
        EtcdSecurity {
            ca: has("ca").then(|| "ca.pem".into()),
            cert: has("cert").then(|| "c.pem".into()),
            key: has("key").then(|| "c.key".into()),
            user: has("user").then(|| "infera-control".into()),
            password_file: has("password").then(|| "pw".into()),
        }
    }

    fn new(endpoints: &[&str], flags: &[&str]) -> Result<EtcdConfig, EtcdConfigError> {
        EtcdConfig::new(endpoints.iter().map(|e| (*e).to_owned()).collect(), security(flags))
    }

    #[test]
    fn credentials_and_certificates_only_go_to_an_https_etcd() {
        assert!(new(&["http://e:2379"], &[]).is_ok(), "plain, as before");
        assert!(new(&[], &[]).is_ok(), "no etcd at all");
        assert!(
            new(&["https://e:2379", "https://f:2379"], &["ca", "cert", "key", "user", "password"]).is_ok()
        );
        assert!(new(&["https://e:2379"], &[]).is_ok(), "TLS with the system's roots");
        for flags in [&["ca"][..], &["cert", "key"], &["user", "password"]] {
            let e = new(&["https://e:2379", "http://f:2379"], flags).unwrap_err();
            assert!(
                matches!(&e, EtcdConfigError::Plaintext { endpoint, .. } if endpoint == "http://f:2379"),
                "{e}"
            );
            assert!(e.to_string().contains("http://f:2379"), "{e}");
            let e = new(&["e:2379"], flags).unwrap_err();
            assert!(matches!(e, EtcdConfigError::Plaintext { .. }), "no scheme is no TLS: {e}");
            let e = new(&[], flags).unwrap_err();
            assert!(matches!(e, EtcdConfigError::NoEndpoints { .. }), "{e}");
        }
        let e = new(&["https://e:2379", "http://f:2379"], &[]).unwrap_err();
        assert!(matches!(e, EtcdConfigError::MixedSchemes { .. }), "{e}");
    }

    #[test]
    fn halves_of_a_pair_are_refused() {
        let https = ["https://e:2379"];
        for half in [&["cert"][..], &["key"], &["ca", "key"]] {
            assert!(matches!(new(&https, half), Err(EtcdConfigError::HalfIdentity)), "{half:?}");
        }
        for half in [&["user"][..], &["password"], &["ca", "user"]] {
            assert!(matches!(new(&https, half), Err(EtcdConfigError::HalfUser)), "{half:?}");
        }
        let mut empty = security(&["user", "password"]);
        empty.user = Some(" ".into());
        let e = EtcdConfig::new(vec!["https://e:2379".into()], empty).unwrap_err();
        assert!(matches!(e, EtcdConfigError::EmptyUser));
    }

    #[test]
    fn the_settings_round_trip_as_flags() {
        let given = security(&["ca", "cert", "key", "user", "password"]);
        let config = EtcdConfig::new(vec!["https://e:2379".into()], given.clone()).unwrap();
        assert_eq!(config.security(), given);
        assert_eq!(config.user(), Some("infera-control"));
        assert_eq!(
            given.flags(),
            [
                "--etcd-ca",
                "ca.pem",
                "--etcd-cert",
                "c.pem",
                "--etcd-key",
                "c.key",
                "--etcd-user",
                "infera-control",
                "--etcd-password-file",
                "pw"
            ]
        );
        assert!(EtcdSecurity::default().flags().is_empty());
    }
}

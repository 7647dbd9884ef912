//! Clients that must not write to a secured test etcd, and the check that they do not: each
//! tries to put infera's keys (a worker record, a setting, the leader key, the proxies' book)
//! and must be refused, leaving every key under `/infera/` as it was. The tests of the etcd
//! security use it, and so can an attack suite: [`EtcdServer::assert_intruders_write_nothing`]
//! on a quiet etcd, [`EtcdServer::intrude`] on a live deployment, [`EtcdServer::write_as`] for
//! one attempt.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, GetOptions, Identity, TlsOptions};

use super::EtcdServer;
use super::secure::{NO_ROLE, STRANGER};
use infera_registry::client::ClientIdentity;
use infera_registry::{RegistryError, keys, roles};

/// A client without the right credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intruder {
    /// Plain `http://` to the TLS port: no certificate, no credentials.
    Plaintext,
    /// TLS that verifies etcd, but no client certificate and no credentials.
    NoCertificate,
    /// Verifies etcd with another CA (etcd's certificate does not verify), shows control's
    /// certificate and password.
    WrongCa,
    /// A certificate named `infera-control` that another CA signed.
    ForeignCertificate,
    /// A certificate etcd's CA signed for a name that is no etcd user, no password.
    UnknownUser,
    /// Control's certificate and user with a wrong password.
    WrongPassword,
    /// A user etcd knows, with its certificate and password, but no role.
    NoRole,
    /// The launcher's user: a role, but only for worker records; it tries everything else.
    OtherRole,
}

impl Intruder {
    /// Every intruder.
    pub const ALL: [Self; 8] = [
        Self::Plaintext,
        Self::NoCertificate,
        Self::WrongCa,
        Self::ForeignCertificate,
        Self::UnknownUser,
        Self::WrongPassword,
        Self::NoRole,
        Self::OtherRole,
    ];

    /// The keys it tries: all of infera's but those its role allows.
    fn targets(self) -> Vec<String> {
        let all = [
            format!("{}intruder", keys::WORKERS),
            keys::config("decode_request_weight"),
            keys::CONTROL_LEADER.to_owned(),
            keys::control_proxy("intruder"),
        ];
        let allowed = |key: &String| {
            self == Self::OtherRole && roles::LAUNCH.grants.iter().any(|g| key.starts_with(g.prefix))
        };
        all.into_iter().filter(|k| !allowed(k)).collect()
    }
}

/// What the intruders try to write.
const INTRUDED: &str = "written-by-an-intruder";

/// One write etcd refused.
#[derive(Debug)]
pub struct Refusal {
    /// Who tried.
    pub intruder: Intruder,
    /// The key.
    pub key: String,
    /// What the client got.
    pub error: RegistryError,
}

fn tls(ca: &Path, identity: Option<&ClientIdentity>) -> TlsOptions {
    let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("the CA")));
    if let Some(id) = identity {
        let (cert, key) = (std::fs::read(&id.cert).expect("a cert"), std::fs::read(&id.key).expect("a key"));
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    tls
}

fn password(file: &Path) -> String {
    std::fs::read_to_string(file).expect("a password file").trim_end().to_owned()
}

impl EtcdServer {
    /// Tries to put `value` at `key` as `intruder` (connect, then put): `Err` says why it was
    /// refused. Bounded: a handshake that hangs fails within a few seconds.
    pub async fn write_as(&self, intruder: Intruder, key: &str, value: &str) -> Result<(), RegistryError> {
        let s = self.secured();
        let control = roles::CONTROL.name;
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(3));
        let (url, options) = match intruder {
            Intruder::Plaintext => (self.url().replacen("https://", "http://", 1), options),
            Intruder::NoCertificate => (self.url(), options.with_tls(tls(&s.ca.ca(), None))),
            Intruder::WrongCa => (
                self.url(),
                options
                    .with_tls(tls(&s.foreign.ca(), Some(&s.identity(control))))
                    .with_user(control, password(&s.password_file(control))),
            ),
            Intruder::ForeignCertificate => {
                (self.url(), options.with_tls(tls(&s.ca.ca(), Some(&s.foreign.client_files(control)))))
            }
            Intruder::UnknownUser => {
                (self.url(), options.with_tls(tls(&s.ca.ca(), Some(&s.identity(STRANGER)))))
            }
            Intruder::WrongPassword => (
                self.url(),
                options
                    .with_tls(tls(&s.ca.ca(), Some(&s.identity(control))))
                    .with_user(control, "not-the-password"),
            ),
            Intruder::NoRole => (
                self.url(),
                options
                    .with_tls(tls(&s.ca.ca(), Some(&s.identity(NO_ROLE))))
                    .with_user(NO_ROLE, password(&s.password_file(NO_ROLE))),
            ),
            Intruder::OtherRole => {
                (self.url(), options.with_tls(tls(&s.ca.ca(), Some(&s.identity(roles::LAUNCH.name)))))
            }
        };
        let write = async {
            let mut client = etcd_client::Client::connect([url], Some(options)).await?;
            client.put(key, value, None).await?;
            Ok(())
        };
        match tokio::time::timeout(Duration::from_secs(8), write).await {
            Ok(result) => result,
            Err(_) => Err(etcd_client::Error::Internal(format!("{intruder:?}: no answer in 8 s")).into()),
        }
    }

    /// Every key under `/infera/` with its value and the revision it was last written at, read
    /// as root.
    pub async fn infera_keys(&self) -> BTreeMap<String, (String, i64)> {
        let mut client = infera_registry::connect(&self.root()).await.expect("root connects");
        let resp = client.get("/infera/", Some(GetOptions::new().with_prefix())).await.expect("root reads");
        resp.kvs()
            .iter()
            .map(|kv| {
                let key = kv.key_str().expect("utf-8").to_owned();
                (key, (kv.value_str().unwrap_or_default().to_owned(), kv.mod_revision()))
            })
            .collect()
    }

    /// Every [`Intruder`] tries each of infera's keys (all at once); panics if one is written,
    /// or if any key under `/infera/` holds what they wrote afterwards. Safe on a live
    /// deployment, whose parts keep writing meanwhile. Returns the refusals, for a caller that
    /// checks the reasons.
    pub async fn intrude(&self) -> Vec<Refusal> {
        let attempts = Intruder::ALL.iter().flat_map(|i| i.targets().into_iter().map(move |k| (*i, k)));
        let results = futures_util::future::join_all(attempts.map(|(intruder, key)| async move {
            let result = self.write_as(intruder, &key, INTRUDED).await;
            (intruder, key, result)
        }))
        .await;
        let mut refusals = Vec::new();
        for (intruder, key, result) in results {
            match result {
                Ok(()) => panic!("{intruder:?} wrote {key}"),
                Err(error) => refusals.push(Refusal { intruder, key, error }),
            }
        }
        let written: Vec<String> = self
            .infera_keys()
            .await
            .into_iter()
            .filter(|(_, (v, _))| v == INTRUDED)
            .map(|(k, _)| k)
            .collect();
        assert!(written.is_empty(), "the intruders wrote {written:?}");
        refusals
    }

    /// Asserts that writes without the right credentials fail and change nothing: [`intrude`]
    /// on an etcd nothing else writes to, and every key under `/infera/` is as it was (value and
    /// revision).
    ///
    /// [`intrude`]: EtcdServer::intrude
    pub async fn assert_intruders_write_nothing(&self) -> Vec<Refusal> {
        let before = self.infera_keys().await;
        let refusals = self.intrude().await;
        assert_eq!(self.infera_keys().await, before, "the intruders changed infera's keys");
        refusals
    }
}

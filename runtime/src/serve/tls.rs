//! TLS for infera's servers and for the channels to control, on rustls with ring.
//!
//! A server's certificate chain, key and optional client CA are files, read at start and again
//! on [`ServerTls::reload`] (the binaries call it on SIGHUP). A reload that does not load leaves
//! the configuration in force; handshakes after a good one use the new files, open connections
//! keep theirs. With a client CA every client must present a certificate it signed (mutual TLS).
//!
//! [`ClientFiles`] is the other side: the CA that verifies control (the system's roots without
//! one), an optional client certificate for mutual TLS, and an optional name to verify instead of
//! the URL's host.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// How long a client gets to finish its handshake before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A file that could not be used as TLS material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No `CERTIFICATE` PEM block in the file, or one that does not parse.
    #[error("{path} holds no PEM certificate{detail}")]
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// What the PEM reader said, if anything.
        detail: String,
    },
    /// No private key PEM block (PKCS#8, PKCS#1 or SEC1) in the file.
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1){detail}")]
    NoKey {
        /// The file.
        path: PathBuf,
        /// What the PEM reader said, if anything.
        detail: String,
    },
    /// The certificate and key do not go together, or rustls refuses them.
    #[error("cannot serve {cert} with the key {key}: {reason}")]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls' reason.
        reason: String,
    },
    /// The CA file holds certificates rustls cannot use as roots.
    #[error("cannot use {path} as a CA: {reason}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// rustls' reason.
        reason: String,
    },
}

/// The application protocols a server offers in ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alpn {
    /// HTTP/2 and HTTP/1.1 (the proxy's API).
    Http,
    /// HTTP/2 only (gRPC).
    Grpc,
}

impl Alpn {
    fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Self::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Self::Grpc => vec![b"h2".to_vec()],
        }
    }
}

/// The files of a server's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFiles {
    /// The certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// With it, clients must present a certificate this CA (PEM bundle) signed.
    pub client_ca: Option<PathBuf>,
}

/// A server's TLS configuration, reloadable.
#[derive(Debug)]
pub struct ServerTls {
    files: ServerFiles,
    alpn: Alpn,
    config: RwLock<Arc<ServerConfig>>,
}

pub(super) fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_owned(), source })
}

fn detail(e: impl std::fmt::Display) -> String {
    format!(" ({e})")
}

/// Every certificate of `pem`, the text of `path` (at least one).
pub(super) fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::NoCertificate { path: path.to_owned(), detail: detail(e) })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_owned(), detail: String::new() });
    }
    Ok(certs)
}

/// The private key in `pem`, the text of `path`.
pub(super) fn private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        let detail = match e {
            rustls::pki_types::pem::Error::NoItemsFound => String::new(),
            e => detail(e),
        };
        TlsError::NoKey { path: path.to_owned(), detail }
    })
}

/// The CA certificates in `pem`, the text of `path`.
pub(super) fn roots(path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path, pem)? {
        roots.add(cert).map_err(|e| TlsError::Ca { path: path.to_owned(), reason: e.to_string() })?;
    }
    Ok(roots)
}

pub(super) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(files: &ServerFiles, alpn: Alpn) -> Result<ServerConfig, TlsError> {
    let chain = certificates(&files.cert, &read(&files.cert)?)?;
    let key = private_key(&files.key, &read(&files.key)?)?;
    let pair = |e: rustls::Error| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        reason: e.to_string(),
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(pair)?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca, &read(ca)?)?), provider())
                    .build()
                    .map_err(|e| TlsError::Ca { path: ca.clone(), reason: e.to_string() })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(pair)?;
    config.alpn_protocols = alpn.protocols();
    Ok(config)
}

impl ServerTls {
    /// Reads `files` (a clear error for each file that does not load).
    pub fn load(files: ServerFiles, alpn: Alpn) -> Result<Self, TlsError> {
        let config = server_config(&files, alpn)?;
        Ok(Self { files, alpn, config: RwLock::new(Arc::new(config)) })
    }

    /// Reads the files again; on an error the configuration in force stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(server_config(&self.files, self.alpn)?);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    /// The files this configuration reads.
    pub fn files(&self) -> &ServerFiles {
        &self.files
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certificates(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The handshake of one accepted connection, on the configuration in force, bounded by
    /// [`HANDSHAKE_TIMEOUT`].
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        let config = self.config.read().unwrap_or_else(|p| p.into_inner()).clone();
        let handshake = tokio_rustls::TlsAcceptor::from(config).accept(tcp);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(done) => done,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")),
        }
    }
}

/// A client certificate and its key (PEM files), for mutual TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

/// How a client verifies and identifies itself to an `https://` control.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientFiles {
    /// The CA bundle that verifies the server; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// The certificate to present (mutual TLS).
    pub identity: Option<IdentityFiles>,
    /// The name to verify in the server's certificate instead of the URL's host.
    pub server_name: Option<String>,
}

impl ClientFiles {
    /// The tonic client configuration, the files read (and checked) now: call again to pick
    /// up new files.
    pub fn tonic(&self) -> Result<tonic::transport::ClientTlsConfig, TlsError> {
        let mut config = tonic::transport::ClientTlsConfig::new();
        match &self.ca {
            Some(ca) => {
                let pem = read(ca)?;
                roots(ca, &pem)?;
                config = config.ca_certificate(tonic::transport::Certificate::from_pem(pem));
            }
            None => config = config.with_native_roots(),
        }
        if let Some(id) = &self.identity {
            let (cert, key) = (read(&id.cert)?, read(&id.key)?);
            certificates(&id.cert, &cert)?;
            private_key(&id.key, &key)?;
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        if let Some(name) = &self.server_name {
            config = config.domain_name(name.clone());
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn self_signed(name: &str) -> rcgen::CertifiedKey<rcgen::KeyPair> {
        rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap()
    }

    #[test]
    fn each_bad_file_is_named_in_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let good = self_signed("localhost");
        let cert = write(dir.path(), "cert.pem", &good.cert.pem());
        let key = write(dir.path(), "key.pem", &good.signing_key.serialize_pem());
        let files =
            |cert: &Path, key: &Path| ServerFiles { cert: cert.into(), key: key.into(), client_ca: None };
        assert!(ServerTls::load(files(&cert, &key), Alpn::Http).is_ok());

        let missing = dir.path().join("missing.pem");
        let e = ServerTls::load(files(&missing, &key), Alpn::Http).unwrap_err();
        assert!(matches!(&e, TlsError::Read { path, .. } if path == &missing), "{e}");
        let e = ServerTls::load(files(&key, &key), Alpn::Http).unwrap_err();
        assert!(matches!(&e, TlsError::NoCertificate { path, .. } if path == &key), "{e}");
        let e = ServerTls::load(files(&cert, &cert), Alpn::Http).unwrap_err();
        assert!(matches!(&e, TlsError::NoKey { path, .. } if path == &cert), "{e}");
        let other = write(dir.path(), "other.pem", &self_signed("x").signing_key.serialize_pem());
        let e = ServerTls::load(files(&cert, &other), Alpn::Http).unwrap_err();
        assert!(matches!(e, TlsError::Pair { .. }), "a key of another certificate: {e}");
        let garbage = write(dir.path(), "garbage.pem", "-----BEGIN CERTIFICATE-----\n!!!\n");
        let e = ServerTls::load(files(&garbage, &key), Alpn::Http).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
    }

    #[test]
    fn a_reload_that_fails_keeps_the_configuration_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let first = self_signed("localhost");
        let cert = write(dir.path(), "cert.pem", &first.cert.pem());
        let key = write(dir.path(), "key.pem", &first.signing_key.serialize_pem());
        let tls =
            ServerTls::load(ServerFiles { cert: cert.clone(), key, client_ca: None }, Alpn::Grpc).unwrap();
        let before = tls.config.read().unwrap().clone();
        std::fs::write(&cert, "not a certificate").unwrap();
        assert!(tls.reload().is_err());
        assert!(Arc::ptr_eq(&before, &tls.config.read().unwrap()), "the old configuration stays");
        std::fs::write(&cert, first.cert.pem()).unwrap();
        tls.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &tls.config.read().unwrap()), "a good reload replaces it");
        assert_eq!(tls.config.read().unwrap().alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn client_files_are_checked_when_the_configuration_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let ca = write(dir.path(), "ca.pem", "no pem here");
        let e = ClientFiles { ca: Some(ca.clone()), ..ClientFiles::default() }.tonic().unwrap_err();
        assert!(matches!(&e, TlsError::NoCertificate { path, .. } if path == &ca), "{e}");
        let good = self_signed("control");
        let ca = write(dir.path(), "ca.pem", &good.cert.pem());
        let id = IdentityFiles { cert: ca.clone(), key: ca.clone() };
        let e =
            ClientFiles { ca: Some(ca.clone()), identity: Some(id), server_name: None }.tonic().unwrap_err();
        assert!(matches!(e, TlsError::NoKey { .. }), "{e}");
        assert!(
            ClientFiles { ca: Some(ca), identity: None, server_name: Some("control".into()) }.tonic().is_ok()
        );
    }
}

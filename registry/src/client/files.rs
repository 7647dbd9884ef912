//! The files of a secured etcd client, read and checked: the CA bundle, the client certificate
//! and key, the password. Each error names the flag and the file.

use std::path::{Path, PathBuf};

use etcd_client::{Certificate, Identity, TlsOptions};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::ClientIdentity;

/// A combination of etcd settings that cannot work, or a file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EtcdConfigError {
    /// Security flags without endpoints.
    #[error("{flags} given without etcd endpoints (--etcd)")]
    NoEndpoints {
        /// The flags given.
        flags: String,
    },
    /// Security flags with a plain endpoint: refused rather than sent in clear.
    #[error(
        "etcd endpoint {endpoint} is not https:// but {flags} are set: certificates and \
         credentials go to etcd only over TLS (write every endpoint https://)"
    )]
    Plaintext {
        /// The first endpoint that is not `https://`.
        endpoint: String,
        /// The security flags given.
        flags: String,
    },
    /// Some endpoints `https://`, some not.
    #[error("etcd endpoint {endpoint} is not https:// while others are: one scheme for all")]
    MixedSchemes {
        /// The first endpoint that is not `https://`.
        endpoint: String,
    },
    /// A certificate without its key or the reverse.
    #[error("--etcd-cert and --etcd-key go together")]
    HalfIdentity,
    /// A user without a password file or the reverse.
    #[error("--etcd-user and --etcd-password-file go together")]
    HalfUser,
    /// An empty user name.
    #[error("--etcd-user is empty")]
    EmptyUser,
    /// A file that cannot be read.
    #[error("{flag} {}: cannot read it: {source}", path.display())]
    Read {
        /// The flag that names it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No PEM certificate in a certificate or CA file.
    #[error("{flag} {}: holds no PEM certificate", path.display())]
    NoCertificate {
        /// The flag that names it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// No PEM private key in the key file.
    #[error("--etcd-key {}: holds no PEM private key (PKCS#8, PKCS#1 or SEC1)", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// An empty password file.
    #[error("--etcd-password-file {}: the file is empty", path.display())]
    EmptyPassword {
        /// The file.
        path: PathBuf,
    },
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, EtcdConfigError> {
    std::fs::read(path).map_err(|source| EtcdConfigError::Read { flag, path: path.to_owned(), source })
}

/// PEM certificates of `path` (at least one).
fn certificates(flag: &'static str, path: &Path) -> Result<Vec<u8>, EtcdConfigError> {
    let pem = read(flag, path)?;
    let valid = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>();
    match valid {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(EtcdConfigError::NoCertificate { flag, path: path.to_owned() }),
    }
}

/// The TLS options: `ca` or the system's roots, and the client identity.
pub(super) fn tls(
    ca: Option<&Path>,
    identity: Option<&ClientIdentity>,
) -> Result<TlsOptions, EtcdConfigError> {
    let mut options = TlsOptions::new();
    options = match ca {
        Some(ca) => options.ca_certificate(Certificate::from_pem(certificates("--etcd-ca", ca)?)),
        None => options.with_native_roots(),
    };
    if let Some(id) = identity {
        let cert = certificates("--etcd-cert", &id.cert)?;
        let key = read("--etcd-key", &id.key)?;
        if PrivateKeyDer::from_pem_slice(&key).is_err() {
            return Err(EtcdConfigError::NoKey { path: id.key.clone() });
        }
        options = options.identity(Identity::from_pem(cert, key));
    }
    Ok(options)
}

/// The password: the file's first line (a trailing newline is not part of it).
pub(super) fn password(path: &Path) -> Result<String, EtcdConfigError> {
    let bytes = read("--etcd-password-file", path)?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().next().unwrap_or_default().trim_end_matches('\r');
    if line.is_empty() {
        return Err(EtcdConfigError::EmptyPassword { path: path.to_owned() });
    }
    Ok(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_the_first_line_and_never_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret \n").unwrap();
        assert_eq!(password(&file).unwrap(), "s3cret ", "inner and trailing spaces are kept");
        std::fs::write(&file, "crlf\r\n").unwrap();
        assert_eq!(password(&file).unwrap(), "crlf");
        std::fs::write(&file, "\n").unwrap();
        assert!(matches!(password(&file), Err(EtcdConfigError::EmptyPassword { .. })));
        let e = password(&dir.path().join("none")).unwrap_err();
        assert!(e.to_string().starts_with("--etcd-password-file "), "{e}");
    }

    #[test]
    fn files_that_hold_no_pem_name_their_flag() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = tls(Some(&junk), None).unwrap_err();
        assert!(matches!(e, EtcdConfigError::NoCertificate { flag: "--etcd-ca", .. }), "{e}");
        let missing = ClientIdentity { cert: dir.path().join("none.pem"), key: junk.clone() };
        let e = tls(None, Some(&missing)).unwrap_err();
        assert!(e.to_string().starts_with("--etcd-cert "), "{e}");
    }
}

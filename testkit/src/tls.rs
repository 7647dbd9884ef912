//! Certificates made at run time (rcgen): a test CA in a temporary directory that issues leaf
//! certificates for servers and clients as PEM files, the way an operator's CA would.

use std::path::{Path, PathBuf};

use rcgen::{CertificateParams, DnType};

use crate::etcd::pki::Ca;

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A CA and the directory its files are written to (removed on drop).
#[derive(Debug)]
pub struct TestCa {
    name: String,
    dir: tempfile::TempDir,
    ca: Ca,
}

impl TestCa {
    /// A new CA called `name` (its certificate at [`TestCa::ca`]).
    ///
    /// # Panics
    /// When the key cannot be made or the directory written.
    pub fn new(name: &str) -> Self {
        let dir = tempfile::tempdir().expect("a directory");
        let ca = Ca::new(dir.path(), name);
        Self { name: name.to_owned(), dir, ca }
    }

    /// The CA's certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.ca.ca()
    }

    /// A proxy's flags to reach an `https://` control this CA vouches for (`--control-ca`), showing
    /// `client` when given (`--control-cert`, `--control-key`: mutual TLS, the certificate's name
    /// the proxy's identity).
    pub fn proxy_flags(&self, client: Option<&Issued>) -> Vec<String> {
        let mut flags = vec!["--control-ca".to_owned(), self.ca().display().to_string()];
        if let Some(c) = client {
            flags.extend([
                "--control-cert".to_owned(),
                c.cert.display().to_string(),
                "--control-key".to_owned(),
                c.key.display().to_string(),
            ]);
        }
        flags
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A certificate for `names` (DNS names or IP addresses) with the common name `file`, good
    /// for both a server and a client, written as `<file>.pem` and `<file>-key.pem`.
    ///
    /// # Panics
    /// When a name is not a name or the files cannot be written.
    pub fn issue(&self, file: &str, names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("valid names");
        params.distinguished_name.push(DnType::OrganizationName, self.name.clone());
        let signed = self.ca.sign(params, file);
        Issued { cert: signed.cert, key: signed.key }
    }
}

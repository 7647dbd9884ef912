//! Certificates made at run time (rcgen): a test CA in a temporary directory that issues leaf
//! certificates for servers and clients as PEM files, the way an operator's CA would.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

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
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A new CA called `name` (its certificate at [`TestCa::ca`]).
    ///
    /// # Panics
    /// When the key cannot be made or the directory written.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::new()).expect("no names");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("a key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).expect("ca.pem");
        Self { name: name.to_owned(), dir, issuer: Issuer::new(params, key) }
    }

    /// The CA's certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
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
        let mut params = CertificateParams::new(names.clone()).expect("valid names");
        params.distinguished_name.push(DnType::CommonName, file);
        params.distinguished_name.push(DnType::OrganizationName, self.name.clone());
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        let issued = Issued {
            cert: self.dir.path().join(format!("{file}.pem")),
            key: self.dir.path().join(format!("{file}-key.pem")),
        };
        std::fs::write(&issued.cert, cert.pem()).expect("the certificate");
        std::fs::write(&issued.key, key.serialize_pem()).expect("the key");
        issued
    }
}

//! Certificates for a secured test etcd, made at run time with rcgen: a CA, etcd's server
//! certificate for its address, and client certificates whose common name is the etcd user
//! (etcd `--client-cert-auth` takes it as the user when a client sends no token). A second,
//! foreign CA makes certificates etcd must refuse. The kit's CA ([`crate::tls`]) issues its
//! certificates with the same [`Ca`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use infera_registry::client::ClientIdentity;

/// A CA whose files are written under a directory.
#[derive(Debug)]
pub struct Ca {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A new CA called `name`, its certificate at `dir/ca.pem`.
    ///
    /// # Panics
    /// When the key cannot be made or the directory written.
    pub fn new(dir: &Path, name: &str) -> Self {
        std::fs::create_dir_all(dir).expect("the certificates' directory");
        let mut params = CertificateParams::new(Vec::new()).expect("no names");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("a key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        std::fs::write(dir.join("ca.pem"), cert.pem()).expect("ca.pem");
        Self { dir: dir.to_owned(), issuer: Issuer::new(params, key) }
    }

    /// The CA's certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// etcd's server certificate for `host` (and `localhost`), good as a client too (etcd's
    /// own gRPC gateway dials itself with it).
    pub(super) fn server(&self, host: IpAddr) -> ClientIdentity {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("valid names");
        params.subject_alt_names.push(SanType::IpAddress(host));
        self.sign(params, "etcd-server")
    }

    /// A client certificate whose common name is `user`.
    pub(super) fn client(&self, user: &str) -> ClientIdentity {
        let params = CertificateParams::new(Vec::new()).expect("no names");
        self.sign(params, user)
    }

    /// The files [`Ca::client`] wrote for `user`.
    pub(super) fn client_files(&self, user: &str) -> ClientIdentity {
        ClientIdentity {
            cert: self.dir.join(format!("{user}.pem")),
            key: self.dir.join(format!("{user}-key.pem")),
        }
    }

    /// Signs `params` with the common name `name`, good for both a server and a client, written
    /// as `<name>.pem` and `<name>-key.pem` in the CA's directory.
    ///
    /// # Panics
    /// When the certificate cannot be made or the files written.
    pub fn sign(&self, mut params: CertificateParams, name: &str) -> ClientIdentity {
        params.distinguished_name.push(DnType::CommonName, name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        let id = ClientIdentity {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}-key.pem")),
        };
        std::fs::write(&id.cert, cert.pem()).expect("the certificate");
        std::fs::write(&id.key, key.serialize_pem()).expect("the key");
        id
    }
}

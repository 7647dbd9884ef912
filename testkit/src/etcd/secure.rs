//! A secured test etcd: TLS on the client port with client certificates required
//! (`--client-cert-auth`, `--trusted-ca-file`, `--cert-file`, `--key-file`), and etcd auth on
//! with infera's roles ([`infera_registry::roles`]), set up through the client API as an operator would
//! with etcdctl: the roles and their permissions, a user per role, `root`, a user with no role,
//! then `auth_enable`.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::pki::Ca;
use infera_registry::client::ClientIdentity;
use infera_registry::{EtcdSecurity, roles};

/// etcd's root user (operators; no infera part runs as it).
pub const ROOT: &str = "root";
/// A user etcd knows, with a password and a certificate, but no role.
pub const NO_ROLE: &str = "infera-nobody";

/// A name etcd's CA signed a client certificate for, but which is no etcd user.
pub(super) const STRANGER: &str = "infera-stranger";

/// How a test client authenticates to a secured test etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// The client certificate alone: its common name is the user.
    Certificate,
    /// The client certificate (etcd requires one) and the user's password from its file.
    Password,
}

/// The certificates, users and passwords of a secured test etcd.
#[derive(Debug)]
pub(super) struct Secure {
    /// The CA etcd trusts and whose certificates clients verify etcd with.
    pub(super) ca: Ca,
    /// A CA etcd does not trust.
    pub(super) foreign: Ca,
    server: ClientIdentity,
    passwords: PathBuf,
}

/// Every user of a secured test etcd, with the roles granted to it.
fn users() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut users = vec![(ROOT, vec![ROOT]), (NO_ROLE, Vec::new())];
    users.extend(roles::ROLES.iter().map(|r| (r.name, vec![r.name])));
    users
}

/// A user's password in the test etcd (deterministic: tests are).
fn password(user: &str) -> String {
    format!("{user}-test-password")
}

impl Secure {
    /// Certificates for etcd at `host` and for every user, and the password files, under `dir`.
    pub(super) fn new(dir: &Path, host: IpAddr) -> Self {
        let ca = Ca::new(&dir.join("ca"), "etcd");
        let foreign = Ca::new(&dir.join("foreign"), "foreign");
        let server = ca.server(host);
        let passwords = dir.join("passwords");
        std::fs::create_dir_all(&passwords).expect("the passwords' directory");
        for (user, _) in users() {
            ca.client(user);
            std::fs::write(passwords.join(user), format!("{}\n", password(user))).expect("a password file");
        }
        ca.client(STRANGER);
        // Control's name, but not etcd's CA.
        foreign.client(roles::CONTROL.name);
        Self { ca, foreign, server, passwords }
    }

    /// etcd's TLS flags.
    pub(super) fn etcd_flags(&self) -> Vec<OsString> {
        let mut flags: Vec<OsString> = Vec::new();
        for (flag, path) in [
            ("--cert-file", &self.server.cert),
            ("--key-file", &self.server.key),
            ("--trusted-ca-file", &self.ca.ca()),
        ] {
            flags.push(flag.into());
            flags.push(path.into());
        }
        flags.push("--client-cert-auth".into());
        flags
    }

    /// The client certificate of `user` (the CA etcd trusts).
    pub(super) fn identity(&self, user: &str) -> ClientIdentity {
        let id = self.ca.client_files(user);
        assert!(id.cert.is_file(), "no certificate for {user}: one of {:?}", users());
        id
    }

    /// The password file of `user`.
    pub(super) fn password_file(&self, user: &str) -> PathBuf {
        self.passwords.join(user)
    }

    /// What `user` reaches etcd with, authenticating by `auth`.
    pub(super) fn security(&self, user: &str, auth: Auth) -> EtcdSecurity {
        let id = self.identity(user);
        let password = auth == Auth::Password;
        EtcdSecurity {
            ca: Some(self.ca.ca()),
            cert: Some(id.cert),
            key: Some(id.key),
            user: password.then(|| user.to_owned()),
            password_file: password.then(|| self.password_file(user)),
        }
    }

    /// Creates infera's roles, the users, and turns auth on, as root (before auth is on, the
    /// client certificate is all etcd asks for). Blocks: its own thread and runtime.
    pub(super) fn set_up_auth(&self, url: &str) {
        let etcd =
            infera_registry::EtcdConfig::new(vec![url.to_owned()], self.security(ROOT, Auth::Certificate))
                .expect("root's settings");
        let setup = async move {
            let mut c = infera_registry::connect(&etcd).await?;
            for role in roles::ROLES {
                roles::grant(&mut c, &role).await?;
            }
            for (user, granted) in users() {
                c.user_add(user, password(user), None).await?;
                for role in granted {
                    c.user_grant_role(user, role).await?;
                }
            }
            c.auth_enable().await?;
            Ok::<(), infera_registry::RegistryError>(())
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt =
                    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                rt.block_on(setup).unwrap_or_else(|e| panic!("setting up etcd auth: {e}"));
            })
            .join()
            .expect("the auth set-up");
        });
    }
}

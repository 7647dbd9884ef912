//! A real etcd (the Debian `etcd-server` binary, or `INFERA_ETCD_BIN`) on loopback ports
//! chosen at run time, with a temporary data dir, for tests. Stop and start it again to
//! simulate an outage: the data dir and ports stay.
//!
//! [`EtcdServer::start_secure`] starts it as a deployment runs it: TLS with client certificates
//! required and etcd auth on with infera's roles ([`secure`]); [`intruder`] tries to get in
//! without the right credentials.

mod intruder;
pub mod pki;
pub mod secure;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use intruder::Intruder;
pub use secure::{Auth, NO_ROLE, ROOT};

use infera_registry::{EtcdConfig, EtcdSecurity};

// The kernel picks a free port; etcd binds it right after. Another process could take it in
// between, which `start` reports as a start failure (and tries again on fresh ports).
use crate::ports::free_port;

/// A running (or stopped) test etcd.
#[derive(Debug)]
pub struct EtcdServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The address it listens on for clients (loopback unless started on another).
    host: std::net::IpAddr,
    client_port: u16,
    peer_port: u16,
    /// Where `/health` is answered in plain HTTP when the client port serves TLS only.
    metrics_port: u16,
    /// TLS, client certificates and auth (`None`: plain and open).
    secure: Option<secure::Secure>,
}

/// A temp dir for etcd's data, in memory where the machine has `/dev/shm`: etcd fsyncs every
/// write, and on a disk busy with builds one fsync can take seconds, which tests would read as
/// lost writes.
fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new().prefix("infera-etcd-").tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("a temp dir")
}

/// What a test etcd is started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    /// Plain HTTP, no auth.
    Plain,
    /// TLS with client certificates required, auth off.
    TlsOnly,
    /// TLS with client certificates required, auth on with infera's roles.
    Auth,
}

/// Starts tried before a test gives up on etcd.
const START_ATTEMPTS: u32 = 4;

impl EtcdServer {
    /// Starts etcd and waits (bounded) until it answers `/health`.
    pub fn start() -> Self {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into())
    }

    /// Starts etcd listening for clients on `host` (an address of this machine).
    pub fn start_on(host: std::net::IpAddr) -> Self {
        Self::start_with(host, Setup::Plain)
    }

    /// Starts etcd as deployments run it: TLS only on the client port, a client certificate
    /// its CA signed required of every client, and auth on with infera's roles, a user per role
    /// ([`infera_registry::roles`]), [`ROOT`] and [`NO_ROLE`]. Certificates and passwords are made now.
    pub fn start_secure() -> Self {
        Self::start_secure_on(std::net::Ipv4Addr::LOCALHOST.into())
    }

    /// [`EtcdServer::start_secure`] listening for clients on `host`.
    pub fn start_secure_on(host: std::net::IpAddr) -> Self {
        Self::start_with(host, Setup::Auth)
    }

    /// TLS with client certificates required, but auth not on yet and no user or role: what an
    /// operator's script ([`infera_registry::roles::script`]) starts from. [`EtcdServer::etcdctl_env`]
    /// is root's etcdctl.
    pub fn start_tls_only() -> Self {
        Self::start_with(std::net::Ipv4Addr::LOCALHOST.into(), Setup::TlsOnly)
    }

    fn start_with(host: std::net::IpAddr, setup: Setup) -> Self {
        let dir = data_dir();
        let secure = (setup != Setup::Plain).then(|| secure::Secure::new(&dir.path().join("tls"), host));
        let mut server = Self {
            child: None,
            dir,
            host,
            client_port: free_port(),
            peer_port: free_port(),
            metrics_port: free_port(),
            secure,
        };
        // A port the kernel handed out can be taken (by another test's connection) before etcd
        // binds it: etcd then exits at once. Fresh ports on a fresh start.
        let mut started = false;
        for _ in 1..START_ATTEMPTS {
            if server.try_resume().is_ok() {
                started = true;
                break;
            }
            (server.client_port, server.peer_port, server.metrics_port) =
                (free_port(), free_port(), free_port());
            let _ = std::fs::remove_dir_all(server.dir.path().join("data"));
        }
        if !started {
            server.resume();
        }
        if let (Some(secure), Setup::Auth) = (&server.secure, setup) {
            secure.set_up_auth(&server.url());
        }
        server
    }

    /// The client URL, e.g. `http://127.0.0.1:41234` (`https://` when secured).
    pub fn url(&self) -> String {
        let scheme = if self.secure.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.client_port)
    }

    /// How an infera part reaches this etcd as `user`, authenticating by `auth`: the CA, the
    /// user's client certificate and, with [`Auth::Password`], its user and password file.
    /// Plain endpoints for a plain etcd (whatever the user).
    pub fn client_as(&self, user: &str, auth: Auth) -> EtcdConfig {
        match &self.secure {
            Some(s) => EtcdConfig::new(vec![self.url()], s.security(user, auth)).expect("valid settings"),
            None => EtcdConfig::plain(vec![self.url()]),
        }
    }

    /// As [`ROOT`] (by certificate): sees and may do everything.
    pub fn root(&self) -> EtcdConfig {
        self.client_as(ROOT, Auth::Certificate)
    }

    /// The `--etcd-*` flags of a part running as `user` (none for a plain etcd); `--etcd` is
    /// the caller's.
    pub fn flags_as(&self, user: &str, auth: Auth) -> Vec<String> {
        self.security_as(user, auth).flags()
    }

    /// The security settings of a part running as `user` (empty for a plain etcd).
    pub fn security_as(&self, user: &str, auth: Auth) -> EtcdSecurity {
        self.secure.as_ref().map(|s| s.security(user, auth)).unwrap_or_default()
    }

    /// The CA that signed etcd's certificate and the clients' (secured etcd only).
    pub fn ca(&self) -> PathBuf {
        self.secured().ca.ca()
    }

    /// The password file of `user` (secured etcd only): tests rewrite it to rotate.
    pub fn password_file(&self, user: &str) -> PathBuf {
        self.secured().password_file(user)
    }

    /// etcdctl's environment for root on a secured etcd: `ETCDCTL_API`, `ETCDCTL_ENDPOINTS`,
    /// `ETCDCTL_CACERT`, `ETCDCTL_CERT`, `ETCDCTL_KEY`.
    pub fn etcdctl_env(&self) -> Vec<(&'static str, String)> {
        let root = self.security_as(ROOT, Auth::Certificate);
        let path = |p: Option<PathBuf>| p.expect("a secured etcd").display().to_string();
        vec![
            ("ETCDCTL_API", "3".to_owned()),
            ("ETCDCTL_ENDPOINTS", self.url()),
            ("ETCDCTL_CACERT", path(root.ca)),
            ("ETCDCTL_CERT", path(root.cert)),
            ("ETCDCTL_KEY", path(root.key)),
        ]
    }

    /// The directory of the users' password files, one per user named as it (secured etcd
    /// only).
    pub fn password_dir(&self) -> PathBuf {
        self.secured().password_file(ROOT).parent().expect("the passwords' directory").to_owned()
    }

    /// The data and certificates directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn secured(&self) -> &secure::Secure {
        self.secure.as_ref().expect("an etcd started with start_secure")
    }

    /// Stops etcd (SIGTERM), keeping its data.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data.
    pub fn resume(&mut self) {
        // The ports are this server's: a start that failed (one still held a moment after the
        // old process went) is tried again on them.
        let mut failure = String::new();
        for attempt in 0..START_ATTEMPTS {
            match self.try_resume() {
                Ok(()) => return,
                Err(e) => failure = e,
            }
            std::thread::sleep(Duration::from_millis(100 << attempt));
        }
        panic!("{failure}");
    }

    /// One start: waits (bounded) for `/health`; an exit during start-up is an error with the
    /// end of etcd's log.
    fn try_resume(&mut self) -> Result<(), String> {
        let bin = std::env::var_os("INFERA_ETCD_BIN").map_or_else(|| PathBuf::from("etcd"), PathBuf::from);
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log_path = self.dir.path().join("etcd.log");
        let log = std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut command = Command::new(&bin);
        command
            .args(["--name", "infera-test", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("infera-test={peer}"), "--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100", "--logger", "zap"])
            .args(["--log-outputs", "stderr", "--log-level", "error"]);
        if let Some(secure) = &self.secure {
            // The client port speaks TLS only: /health is asked on a plain metrics port.
            let metrics = format!("http://{}:{}", self.host, self.metrics_port);
            command.args(secure.etcd_flags()).args(["--listen-metrics-urls", &metrics]);
        }
        let child =
            command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn().unwrap_or_else(|e| {
                panic!("cannot start {} ({e}); install etcd-server (cargo xtask setup)", bin.display())
            });
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(20);
        while !self.healthy() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
                return Err(format!("etcd exited during start-up on {client} and {peer}: {status}: {tail}"));
            }
            assert!(Instant::now() < end, "etcd did not become healthy on {}", self.url());
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn healthy(&self) -> bool {
        let port = if self.secure.is_some() { self.metrics_port } else { self.client_port };
        let Ok(mut s) = TcpStream::connect((self.host, port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        if s.write_all(b"GET /health HTTP/1.0\r\n\r\n").is_err() {
            return false;
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.contains("\"health\":\"true\"")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn a_restart_whose_port_is_still_held_is_tried_again() {
        let mut etcd = EtcdServer::start();
        etcd.stop();
        // Something else holds the client port when etcd comes back: the first start fails.
        let holder = TcpListener::bind(("127.0.0.1", etcd.client_port)).expect("the stopped etcd's port");
        let log = etcd.dir.path().join("etcd.log");
        let resumed = std::thread::scope(|s| {
            let resuming = s.spawn(|| etcd.resume());
            // Let the port go once etcd has said it cannot bind it.
            let end = Instant::now() + Duration::from_secs(20);
            while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("address already in use")) {
                assert!(Instant::now() < end, "etcd never failed on the held port");
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(holder);
            resuming.join().is_ok()
        });
        assert!(resumed, "the restart was not tried again");
        assert!(etcd.healthy(), "etcd is back on its port");
    }
}

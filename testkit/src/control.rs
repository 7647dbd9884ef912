//! `infera-control` on port-0 listeners, in this process or as a process, with a static
//! workers file written from worker records (or raw TOML, for tests of the file itself), or
//! reading its workers from etcd.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use clap::Parser as _;
use infera_proto::pb::admin_client::AdminClient;
use infera_proto::pb::router_client::RouterClient;
use infera_proto::pb::{self};
use infera_proto::types::{RegisteredWorker, WorkerRecord};
use tokio::net::TcpListener;
use tonic::transport::{Channel, ClientTlsConfig};

use crate::credentials::RouterTokens;
use crate::http;
use crate::node::Node;
use crate::process::{Process, ProcessSpec, Rebind, binary};
use crate::server::Server;
use crate::tls::{Issued, TestCa};

/// Where control's workers come from.
#[derive(Clone, Debug, Default)]
pub enum Workers {
    /// No static file (with `--etcd`, or to test an empty registry).
    #[default]
    None,
    /// A static file listing these records (`infera-launch up` writes the same).
    Records(Vec<WorkerRecord>),
    /// A static file listing records as a registrar may write them (`dp_size` left out or not).
    Registered(Vec<RegisteredWorker>),
    /// A static file with exactly this text.
    Toml(String),
}

/// A control to start.
#[derive(Clone, Debug)]
pub struct ControlSpec {
    /// Its workers file.
    pub workers: Workers,
    /// `--etcd` endpoints (comma-joined on the command line).
    pub etcd: Vec<String>,
    /// `--seed` (tie-breaks); `None` leaves it to the OS.
    pub seed: Option<u64>,
    /// Every other flag, as the binary takes them.
    pub flags: Vec<String>,
    /// How the kit's own clients ([`Control::router`], [`Control::admin`]) reach a control that
    /// serves TLS: its CA, and with `--tls-client-ca` a client certificate ([`ControlSpec::tls`],
    /// [`ControlSpec::client_certificates`]).
    pub kit_tls: Option<ClientTlsConfig>,
}

impl ControlSpec {
    /// Control over these workers with seed 7 and no other flag.
    pub fn new(workers: Workers) -> Self {
        Self { workers, etcd: Vec::new(), seed: Some(7), flags: Vec::new(), kit_tls: None }
    }

    /// Router calls need a token `tokens` lists (`--router-tokens`); the file is read again on
    /// SIGHUP.
    pub fn router_tokens(self, tokens: &RouterTokens) -> Self {
        self.flags(["--router-tokens".to_owned(), tokens.path().display().to_string()])
    }

    /// Serves gRPC over TLS with `server` (a certificate of `ca` naming 127.0.0.1); the kit's own
    /// clients trust `ca`.
    ///
    /// # Panics
    /// When `ca`'s certificate cannot be read.
    pub fn tls(mut self, ca: &TestCa, server: &Issued) -> Self {
        let pem = std::fs::read(ca.ca()).expect("the CA's certificate");
        self.kit_tls =
            Some(ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(pem)));
        self.flags([
            "--tls-cert".to_owned(),
            server.cert.display().to_string(),
            "--tls-key".to_owned(),
            server.key.display().to_string(),
        ])
    }

    /// Every caller needs a client certificate `ca` signed (`--tls-client-ca`; after
    /// [`ControlSpec::tls`]); the kit's own clients show `kit`, so their Router calls are
    /// `kit`'s identity (its common name).
    ///
    /// # Panics
    /// When `kit`'s files cannot be read.
    pub fn client_certificates(mut self, ca: &TestCa, kit: &Issued) -> Self {
        let (cert, key) = (std::fs::read(&kit.cert).expect("cert"), std::fs::read(&kit.key).expect("key"));
        let identity = tonic::transport::Identity::from_pem(cert, key);
        self.kit_tls = Some(self.kit_tls.take().unwrap_or_default().identity(identity));
        self.flags(["--tls-client-ca".to_owned(), ca.ca().display().to_string()])
    }

    /// Whether its flags give the Router a credential.
    fn authenticates(&self) -> bool {
        self.flags.iter().any(|f| f == "--router-tokens" || f == "--tls-client-ca")
    }

    /// Adds flags.
    pub fn flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// Reads its workers (and persisted settings) from etcd at `url`.
    pub fn etcd(mut self, url: impl Into<String>) -> Self {
        self.etcd.push(url.into());
        self
    }

    fn workers_file(&self) -> anyhow::Result<Option<tempfile::NamedTempFile>> {
        let text = match &self.workers {
            Workers::None => return Ok(None),
            Workers::Records(records) => infera_launcher::records::workers_file(records),
            Workers::Registered(records) => infera_launcher::records::workers_file(records),
            Workers::Toml(text) => text.clone(),
        };
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), text)?;
        Ok(Some(file))
    }

    /// The value of `--admin-listen` in its flags, when it serves Admin apart.
    fn admin_listen(&self) -> Option<&str> {
        let at = self.flags.iter().position(|f| f == "--admin-listen")?;
        self.flags.get(at + 1).map(String::as_str)
    }

    fn argv(&self, file: Option<&tempfile::NamedTempFile>) -> Vec<String> {
        let mut argv = Vec::new();
        if let Some(f) = file {
            argv.extend(["--workers".to_owned(), f.path().display().to_string()]);
        }
        if !self.etcd.is_empty() {
            argv.extend(["--etcd".to_owned(), self.etcd.join(",")]);
        }
        if let Some(seed) = self.seed {
            argv.extend(["--seed".to_owned(), seed.to_string()]);
        }
        argv.extend(self.flags.iter().cloned());
        argv
    }

    /// Starts it in this process.
    ///
    /// # Errors
    /// When the flags do not parse or validate.
    pub async fn start(self) -> anyhow::Result<Control> {
        let grpc = TcpListener::bind("127.0.0.1:0").await?;
        let metrics = TcpListener::bind("127.0.0.1:0").await?;
        let admin = match self.admin_listen() {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let addrs = (grpc.local_addr()?, metrics.local_addr()?);
        let admin_addr = admin.as_ref().map(TcpListener::local_addr).transpose()?;
        let file = self.workers_file()?;
        let node = Node::InProcess(in_process(&self, file.as_ref(), grpc, admin, metrics)?);
        Ok(Control { addr: addrs.0, metrics_addr: addrs.1, admin_addr, node, spec: self, _workers: file })
    }

    /// Starts it as an `infera-control` process (its ports kept on restart).
    ///
    /// # Errors
    /// When the binary is missing or does not start.
    pub async fn spawn(self) -> anyhow::Result<Control> {
        self.spawn_in(None).await
    }

    /// Starts it as an `infera-control` process inside the network namespace `netns` (named, with
    /// the address it listens on there), or here when `None`.
    ///
    /// # Errors
    /// When the binary is missing or does not start.
    pub async fn spawn_in(self, netns: Option<(&str, std::net::IpAddr)>) -> anyhow::Result<Control> {
        let file = self.workers_file()?;
        let host = netns.map_or_else(|| "127.0.0.1".to_owned(), |(_, ip)| ip.to_string());
        let mut args = Vec::new();
        let mut program = binary("infera-control")?;
        if let Some((name, _)) = netns {
            args.extend(["netns", "exec", name].map(str::to_owned));
            args.push(program.display().to_string());
            program = "ip".into();
        }
        // In a namespace it listens on an address that is not loopback: a spec without Router
        // credentials is the suite's open Router, as on loopback.
        let open = netns.is_some() && !self.authenticates();
        args.extend([
            "--listen".to_owned(),
            format!("{host}:0"),
            "--metrics-listen".to_owned(),
            format!("{host}:0"),
        ]);
        args.extend(self.argv(file.as_ref()));
        if open && !self.flags.iter().any(|f| f == "--router-allow-unauthenticated") {
            args.push("--router-allow-unauthenticated".to_owned());
        }
        let mut rebind = vec![
            Rebind { flag: "--listen", key: "grpc=", port_only: false },
            Rebind { flag: "--metrics-listen", key: "metrics=", port_only: false },
        ];
        if self.admin_listen().is_some() {
            rebind.push(Rebind { flag: "--admin-listen", key: "admin=", port_only: false });
        }
        let spec = ProcessSpec {
            name: "infera-control".to_owned(),
            program,
            args,
            env: BTreeMap::from([("INFERA_LOG".to_owned(), "warn".to_owned())]),
            rebind,
        };
        let process = tokio::task::spawn_blocking(move || Process::start(spec)).await??;
        let (addr, metrics_addr) = (process.addr("grpc="), process.addr("metrics="));
        let admin_addr = self.admin_listen().map(|_| process.addr("admin="));
        Ok(Control {
            addr,
            metrics_addr,
            admin_addr,
            node: Node::Process(process),
            spec: self,
            _workers: file,
        })
    }
}

impl ControlSpec {
    /// Control's configuration, as the binary would parse these flags, with the workers file
    /// it reads (keep it as long as control runs), for a caller that runs control itself.
    ///
    /// # Errors
    /// When the flags do not parse or validate.
    pub fn config(&self) -> anyhow::Result<(infera_control::Config, Option<tempfile::NamedTempFile>)> {
        let file = self.workers_file()?;
        Ok((parse(self, file.as_ref())?, file))
    }
}

fn parse(
    spec: &ControlSpec,
    file: Option<&tempfile::NamedTempFile>,
) -> anyhow::Result<infera_control::Config> {
    let mut argv = vec!["infera-control".to_owned()];
    argv.extend(spec.argv(file));
    Ok(infera_control::Config::try_from(infera_control::Args::try_parse_from(argv)?)?)
}

fn in_process(
    spec: &ControlSpec,
    file: Option<&tempfile::NamedTempFile>,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    metrics: TcpListener,
) -> anyhow::Result<Server> {
    let config = parse(spec, file)?;
    let listeners = infera_control::Listeners { grpc, admin, metrics };
    Ok(Server::spawn("infera-control", move |stop| infera_control::run(listeners, config, stop)))
}

/// A running control.
#[derive(Debug)]
pub struct Control {
    /// Its gRPC address.
    pub addr: SocketAddr,
    /// Its `/metrics` address.
    pub metrics_addr: SocketAddr,
    /// Its Admin address when it serves Admin apart (`--admin-listen`); else Admin is at `addr`.
    pub admin_addr: Option<SocketAddr>,
    /// How it runs.
    pub node: Node,
    spec: ControlSpec,
    _workers: Option<tempfile::NamedTempFile>,
}

impl Control {
    /// The static workers file it reads, if any.
    pub fn workers_file(&self) -> Option<&std::path::Path> {
        self._workers.as_ref().map(tempfile::NamedTempFile::path)
    }

    fn scheme(&self) -> &'static str {
        if self.spec.flags.iter().any(|f| f == "--tls-cert") { "https" } else { "http" }
    }

    /// Its gRPC URL (`https://` when its flags give `--tls-cert`).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme(), self.addr)
    }

    /// Where it serves Admin: its Admin socket's URL with `--admin-listen`, else [`Self::url`].
    pub fn admin_url(&self) -> String {
        self.admin_addr.map_or_else(|| self.url(), |a| format!("{}://{a}", self.scheme()))
    }

    /// A channel on its own connection (over TLS with the kit's files when control serves TLS).
    ///
    /// # Panics
    /// When control does not accept.
    pub async fn channel(&self) -> Channel {
        self.connect(self.url()).await
    }

    /// A channel to its Admin service ([`Self::admin_url`]) on its own connection.
    ///
    /// # Panics
    /// When control does not accept.
    pub async fn admin_channel(&self) -> Channel {
        self.connect(self.admin_url()).await
    }

    async fn connect(&self, url: String) -> Channel {
        let mut endpoint = Channel::from_shared(url).expect("a URL");
        if let Some(tls) = &self.spec.kit_tls {
            endpoint = endpoint.tls_config(tls.clone()).expect("the kit's TLS");
        }
        endpoint.connect().await.expect("control accepts")
    }

    /// A Router client on its own connection.
    pub async fn router(&self) -> RouterClient<Channel> {
        RouterClient::new(self.channel().await)
    }

    /// An Admin client on its own connection (to the Admin socket with `--admin-listen`).
    pub async fn admin(&self) -> AdminClient<Channel> {
        AdminClient::new(self.admin_channel().await)
    }

    /// Its `/metrics` text.
    ///
    /// # Errors
    /// When it does not answer 200.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        http::get_ok(&format!("http://{}/metrics", self.metrics_addr)).await
    }

    /// Every target's row (`Admin/ListTargets`).
    ///
    /// # Panics
    /// When control does not answer.
    pub async fn targets(&self) -> Vec<pb::TargetStatus> {
        let rows =
            self.admin().await.list_targets(pb::ListTargetsRequest::default()).await.expect("ListTargets");
        rows.into_inner().targets
    }

    /// Waits (bounded) until control's view holds `n` targets (`infera_router_targets` summed,
    /// read over plain HTTP whatever its gRPC's TLS or admin token): control routes to a worker
    /// only once its `/server_info` has answered.
    ///
    /// # Errors
    /// When they are not in the view in time.
    pub async fn wait_targets(&self, n: usize) -> anyhow::Result<()> {
        let what = format!("control to hold {n} targets");
        crate::eventually::poll(std::time::Duration::from_secs(30), &what, async || {
            let metrics = self.metrics().await.ok()?;
            (http::metric_sum(&metrics, "infera_router_targets", "") == n as f64).then_some(())
        })
        .await?;
        Ok(())
    }

    /// Waits (bounded) until it leads: a control with `--etcd` books only once elected.
    ///
    /// # Errors
    /// When it is not elected in time.
    pub async fn wait_leading(&self) -> anyhow::Result<()> {
        let url = self.url();
        crate::eventually::poll(std::time::Duration::from_secs(30), "control to lead", async || {
            let mut admin = self.admin().await;
            let config = admin.get_config(pb::GetConfigRequest::default()).await.ok()?.into_inner();
            config.leadership.filter(|l| l.url == url && l.role != "follower").map(|_| ())
        })
        .await?;
        Ok(())
    }

    /// Held requests and booked input tokens summed over every target.
    pub async fn ledger(&self) -> Ledger {
        self.targets().await.iter().fold(Ledger::default(), |l, r| Ledger {
            held_requests: l.held_requests + r.held_requests,
            booked_tokens: l.booked_tokens + r.booked_input_tokens,
        })
    }

    /// Stops it gracefully (bounded).
    ///
    /// # Errors
    /// As [`Node::stop`].
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.node.stop().await
    }

    /// Stops it and starts a new instance (no leases, no reservations, a new epoch) with the
    /// same flags on the same addresses. A crash first when `crash` (abort / SIGKILL).
    ///
    /// # Errors
    /// When the old one does not stop or the new one does not start.
    pub async fn restart(&mut self, crash: bool) -> anyhow::Result<()> {
        if crash {
            self.node.kill();
        } else {
            self.node.stop().await?;
        }
        match &mut self.node {
            Node::InProcess(_) => {
                let grpc = TcpListener::bind(self.addr).await?;
                let metrics = TcpListener::bind(self.metrics_addr).await?;
                let admin = match self.admin_addr {
                    Some(addr) => Some(TcpListener::bind(addr).await?),
                    None => None,
                };
                let (spec, workers) = (&self.spec, self._workers.as_ref());
                self.node = Node::InProcess(in_process(spec, workers, grpc, admin, metrics)?);
            }
            // Waits for the listening line on this thread; the child needs nothing of it.
            Node::Process(p) => p.restart()?,
        }
        Ok(())
    }
}

/// What the ledger holds, summed over targets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Held requests.
    pub held_requests: u64,
    /// Booked input tokens.
    pub booked_tokens: u64,
}

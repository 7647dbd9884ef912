//! `infera-proxy` on a port-0 listener, in this process or as a process, against one or more
//! controls.

use std::collections::BTreeMap;
use std::time::Duration;

use ::http::StatusCode;
use clap::Parser as _;
use tokio::net::TcpListener;

use crate::credentials::Token;
use crate::eventually::poll;
use crate::http;
use crate::node::Node;
use crate::process::{Process, ProcessSpec, Rebind, binary, set_flag};
use crate::server::Server;
use crate::tls::{Issued, TestCa};

/// How long a proxy may take to hold a lease and list the model.
const READY: Duration = Duration::from_secs(30);

/// A proxy to start.
#[derive(Clone, Debug)]
pub struct ProxySpec {
    /// Control's gRPC URL(s), `--control`.
    pub control: String,
    /// Every other flag.
    pub flags: Vec<String>,
}

impl ProxySpec {
    /// A proxy of `control` that refreshes its target list every 200 ms and waits up to 2 s
    /// for a pick: a debug build on a loaded 2-core machine can take longer than the 50 ms
    /// default, and a test that is not about the deadline must not see fallbacks.
    pub fn new(control: impl Into<String>) -> Self {
        let flags = ["--targets-refresh-ms", "200", "--pick-timeout-ms", "2000"];
        Self { control: control.into(), flags: flags.map(str::to_owned).into() }
    }

    /// Sets `flag` to `value` (replacing an earlier value).
    pub fn flag(mut self, flag: &str, value: impl ToString) -> Self {
        set_flag(&mut self.flags, flag, value.to_string());
        self
    }

    /// Adds flags (a flag given twice: clap keeps the last).
    pub fn flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        let flags: Vec<String> = flags.into_iter().map(Into::into).collect();
        let mut rest = flags.iter();
        while let Some(f) = rest.next() {
            // Known two-token flags replace the defaults set by `new`.
            if ["--targets-refresh-ms", "--pick-timeout-ms"].contains(&f.as_str())
                && let Some(v) = rest.next()
            {
                self = self.flag(f, v);
            } else {
                self.flags.push(f.clone());
            }
        }
        self
    }

    /// Proves itself to control with `token` (`--control-token-file`).
    pub fn control_token(self, token: &Token) -> Self {
        self.flags(token.proxy_flags())
    }

    /// Reaches an `https://` control trusting `ca` (`--control-ca`), showing `client` when given
    /// (`--control-cert`, `--control-key`: mutual TLS, the certificate's name its identity).
    pub fn control_tls(self, ca: &TestCa, client: Option<&Issued>) -> Self {
        self.flags(ca.proxy_flags(client))
    }

    /// `https` when the flags give `--tls-cert`.
    fn scheme(&self) -> &'static str {
        if self.flags.iter().any(|f| f == "--tls-cert") { "https" } else { "http" }
    }

    fn argv(&self) -> Vec<String> {
        let mut argv = vec!["--control".to_owned(), self.control.clone()];
        argv.extend(self.flags.iter().cloned());
        argv
    }

    /// Starts it in this process.
    ///
    /// # Errors
    /// When the flags do not parse or validate.
    pub async fn start(self) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("{}://{}", self.scheme(), listener.local_addr()?);
        let mut argv = vec!["infera-proxy".to_owned()];
        argv.extend(self.argv());
        let config = infera_proxy::Config::try_from(infera_proxy::Args::try_parse_from(argv)?)?;
        let metrics = match config.connections.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let metrics_url =
            metrics.as_ref().map(|l| l.local_addr().map(|a| format!("http://{a}"))).transpose()?;
        let listeners = infera_proxy::Listeners { api: listener, metrics };
        let server = Server::spawn("infera-proxy", move |stop| infera_proxy::run(listeners, config, stop));
        Ok(Proxy { url, metrics_url, node: Node::InProcess(server) })
    }

    /// Starts it as an `infera-proxy` process (its port kept on restart).
    ///
    /// # Errors
    /// When the binary is missing or does not start.
    pub async fn spawn(self) -> anyhow::Result<Proxy> {
        let scheme = self.scheme();
        let mut args = vec!["--listen".to_owned(), "127.0.0.1:0".to_owned()];
        args.extend(self.argv());
        let spec = ProcessSpec {
            name: "infera-proxy".to_owned(),
            program: binary("infera-proxy")?,
            args,
            env: BTreeMap::from([("INFERA_LOG".to_owned(), "warn".to_owned())]),
            rebind: vec![
                Rebind { flag: "--listen", key: "http=", port_only: false },
                Rebind { flag: "--metrics-listen", key: "metrics=", port_only: false },
            ],
        };
        let process = tokio::task::spawn_blocking(move || Process::start(spec)).await??;
        let metrics_url = process.try_addr("metrics=").map(|a| format!("http://{a}"));
        let url = format!("{}://{}", scheme, process.addr("http="));
        Ok(Proxy { url, metrics_url, node: Node::Process(process) })
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    /// Its base URL.
    pub url: String,
    /// Where it serves `/metrics` when apart from the API (`--metrics-listen`).
    pub metrics_url: Option<String>,
    /// How it runs.
    pub node: Node,
}

impl Proxy {
    /// Waits (bounded) until it is ready (`/readiness`), lists `model` and holds a lease with
    /// control as it sees it itself (`infera_proxy_control_lease`). Control counts a lease before
    /// the proxy has read OpenLease's answer, so a test that waited on control's count alone
    /// could still see its first picks go to the fallback.
    ///
    /// # Errors
    /// When it is not ready in time.
    pub async fn wait_ready(&self, model: &str) -> anyhow::Result<()> {
        self.wait_ready_as(model, None).await
    }

    /// [`Proxy::wait_ready`] for a proxy with API keys: `/v1/models` is asked with `key`.
    ///
    /// # Errors
    /// When it is not ready in time.
    pub async fn wait_ready_as(&self, model: &str, key: Option<&str>) -> anyhow::Result<()> {
        let needle = format!("\"id\":\"{model}\"");
        poll(READY, &format!("proxy {} to be ready with model {model} and a lease", self.url), async || {
            let url = format!("{}/v1/models", self.url);
            let models = http::get_as(&url, key).await.ok()?;
            let ready = http::get(&format!("{}/readiness", self.url)).await.ok()?;
            let leased =
                http::metric_sum(&self.metrics().await.ok()?, "infera_proxy_control_lease", "") == 1.0;
            (models.0 == StatusCode::OK && models.1.contains(&needle) && ready.0 == StatusCode::OK && leased)
                .then_some(())
        })
        .await?;
        Ok(())
    }

    /// Its `/metrics` text.
    ///
    /// # Errors
    /// When it does not answer 200.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        http::get_ok(&format!("{}/metrics", self.metrics_url.as_deref().unwrap_or(&self.url))).await
    }

    /// Stops it gracefully (bounded): open requests finish, its lease is closed.
    ///
    /// # Errors
    /// As [`Node::stop`].
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.node.stop().await
    }
}

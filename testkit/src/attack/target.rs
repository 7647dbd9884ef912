//! The deployment the attacks run against, configured as the security manual asks: control's gRPC
//! over TLS with Router tokens (a token per proxy) and its bounds set low enough to cross, two
//! proxies with API keys (two tenants), header and body timeouts, a connection cap and `/metrics`
//! on an address of their own, and workers registered in an etcd with TLS, client certificates
//! and infera's roles. Control and the proxies run as processes (their RSS is measured); the sims
//! run in this process.

use std::time::Duration;

use ::http::StatusCode;
use infera_proto::pb::router_client::RouterClient;
use serde_json::{Value, json};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

use super::Scale;
use crate::credentials::{ApiKeys, RouterTokens, Token};
use crate::http;
use crate::sim::SimSpec;
use crate::tls::TestCa;
use crate::{Cluster, ClusterSpec, ControlSpec, Proxy, Workers};

/// The served model.
pub(super) const MODEL: &str = "m";

/// Control's `--max-requests-per-rank`: what phantom legs can fill at most.
pub(super) const MAX_PER_RANK: u64 = 64;

/// A running hardened deployment and the credentials an attacker may or may not hold.
#[derive(Debug)]
pub struct Target {
    /// The deployment.
    pub cluster: Cluster,
    /// The CA of control's certificate (public: an attacker knows it too).
    pub ca: TestCa,
    /// Control's tokens file.
    pub tokens: RouterTokens,
    /// A valid Router credential of an identity no proxy uses: what an attacker holds who stole
    /// one proxy's token (or runs a rogue proxy) — it must still touch nothing of the others'.
    pub rogue: Token,
    /// A valid Router credential whose leases and reservations the rogue aims at (booked
    /// directly, so that the case knows every id it holds).
    pub victim: Token,
    /// Tenant alice's API key.
    pub alice: String,
    /// Tenant bob's API key.
    pub bob: String,
    api_keys: ApiKeys,
}

/// A random secret of 24 bytes, as hex.
pub(super) fn secret() -> String {
    let bytes: [u8; 24] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Target {
    /// Starts it with the bounds of `scale`.
    ///
    /// # Errors
    /// When a part does not start.
    pub async fn start(scale: &Scale) -> anyhow::Result<Self> {
        let ca = TestCa::new("infera-attack");
        let server = ca.issue("control", &["127.0.0.1"]);
        let mut tokens = RouterTokens::new();
        let proxy_tokens = [tokens.issue("proxy-0"), tokens.issue("proxy-1")];
        let rogue = tokens.issue("rogue");
        let victim = tokens.issue("victim");
        let api_keys = ApiKeys::new(&["alice", "bob"]);
        let (alice, bob) = (api_keys.key("alice").to_owned(), api_keys.key("bob").to_owned());
        let keys = api_keys.path();
        let sims = vec![
            SimSpec::prefill("prefill-0", MODEL),
            SimSpec::decode("decode-0", MODEL, 2),
            SimSpec::decode("decode-1", MODEL, 1),
        ];
        let mut spec = ClusterSpec::new(MODEL, sims);
        spec.etcd = Some(Duration::from_secs(10));
        spec.etcd_secured = true;
        spec.processes = true;
        spec.sims_in_process = true;
        spec.control = ControlSpec::new(Workers::None)
            .flags(["--decode-input-demand", "on"])
            .tls(&ca, &server)
            .router_tokens(&tokens)
            .flags([
                "--max-leases-per-identity".to_owned(),
                scale.max_leases.to_string(),
                "--session-max".to_owned(),
                scale.session_max.to_string(),
                "--eject-after-failures".to_owned(),
                "3".to_owned(),
                "--max-requests-per-rank".to_owned(),
                MAX_PER_RANK.to_string(),
            ]);
        let keys = keys.display().to_string();
        spec.proxy_flags = [
            "--api-keys",
            &keys,
            "--metrics-listen",
            "127.0.0.1:0",
            "--header-read-timeout-ms",
            "1000",
            "--body-read-timeout-ms",
            "2000",
            "--max-connections",
            &scale.max_connections.to_string(),
            "--max-body-bytes-in-flight",
            &(scale.body_budget_mib << 20).to_string(),
        ]
        .map(str::to_owned)
        .into_iter()
        .chain(ca.proxy_flags(None))
        .collect();
        spec.proxy_api_key = Some(alice.clone());
        spec.each_proxy = proxy_tokens.iter().map(Token::proxy_flags).collect();
        let cluster = spec.start().await?;
        Ok(Self { cluster, ca, tokens, rogue, victim, alice, bob, api_keys })
    }

    /// The first proxy (the one the HTTP attacks aim at).
    pub fn proxy(&self) -> &Proxy {
        &self.cluster.proxies[0]
    }

    /// The API keys file the proxies read.
    pub fn keys_file(&self) -> std::path::PathBuf {
        self.api_keys.path()
    }

    /// The processes whose memory is measured: control and each proxy, by name.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let control = self.cluster.control.node.pid().map(|p| ("control".to_owned(), p));
        let proxies = self
            .cluster
            .proxies
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.node.pid().map(|pid| (format!("proxy-{i}"), pid)));
        control.into_iter().chain(proxies).collect()
    }

    /// A Router client over TLS that trusts control's CA and shows no credential (a call carries
    /// whatever the attacker adds).
    ///
    /// # Errors
    /// When control does not accept the connection.
    pub async fn router(&self) -> anyhow::Result<RouterClient<Channel>> {
        let pem = std::fs::read(self.ca.ca())?;
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
        let channel = Channel::from_shared(self.cluster.control.url())?.tls_config(tls)?.connect().await?;
        Ok(RouterClient::new(channel))
    }

    /// A chat completion through the first proxy as `key`: status and body.
    ///
    /// # Errors
    /// When the connection fails.
    pub async fn chat(&self, key: &str, body: &Value) -> anyhow::Result<(StatusCode, String)> {
        let auth = format!("Bearer {key}");
        let url = format!("{}/v1/chat/completions", self.proxy().url);
        http::request_with(http::Method::POST, &url, Some(body), &[("authorization", &auth)]).await
    }

    /// After a case: alice is still served through every proxy and the ledger returns to zero.
    ///
    /// # Errors
    /// When a request is not answered 200 or something stays booked.
    pub async fn still_serves(&self) -> anyhow::Result<()> {
        let body = chat_body("still there?", 4, false);
        for proxy in &self.cluster.proxies {
            let auth = format!("Bearer {}", self.alice);
            let url = format!("{}/v1/chat/completions", proxy.url);
            let (status, answer) =
                http::request_with(http::Method::POST, &url, Some(&body), &[("authorization", &auth)])
                    .await?;
            anyhow::ensure!(status == StatusCode::OK, "{} answered {status}: {answer}", proxy.url);
        }
        self.cluster.ledger_returns_to_zero().await
    }
}

/// A chat request for `MODEL`.
pub(super) fn chat_body(content: &str, max_tokens: u32, stream: bool) -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
    })
}

/// Resets the peak RSS the kernel keeps for `pid` (`/proc/<pid>/clear_refs`, 5), so that the next
/// [`peak_rss_kib`] reads the peak since.
pub fn reset_peak_rss(pid: u32) {
    // Best effort: without the right to write it, the peak is the process's lifetime peak.
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The peak RSS of `pid` (`VmHWM`), in KiB; 0 when it cannot be read.
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap_or("");
    line.trim().trim_end_matches("kB").trim().parse().unwrap_or(0)
}

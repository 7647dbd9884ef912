//! One fresh 1P1D deployment in this process, every socket on port 0: a prefill sim, a decode
//! sim with 8 attention-DP ranks, `infera-control` with the arm's flags and a static workers
//! file, and one `infera-proxy`. Nothing is shared between arms: each gets new listeners, a
//! new control (empty ledger, counters at zero) and new engines (empty prefix caches).
//!
//! The shape is the seeds' kit as the emulator takes it (`examples/sim_1p1d`): the prefill
//! chunks at 8k with shortest-prefill-first and carries the decode's EAGLE flags; the decode
//! runs TP 8 with DP attention over 8 ranks. The prefill's prefix cache stands for the kit's
//! write-back HiCache (250 GB per PP stage, 4 stages, at the sim's 70,272 KV bytes per token ≈
//! 14.2 M tokens) through `--sim-params`; every timing parameter keeps the sim's calibrated
//! default.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::Parser as _;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::arm::Arm;

/// The served model name.
pub(crate) const MODEL: &str = "glm-5.2";
/// How long a deployment may take to become ready, and each server to stop.
const DEADLINE: Duration = Duration::from_secs(30);

/// What to start.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) arm: Arm,
    /// The sims' `--sim-speedup`.
    pub(crate) speedup: f64,
    /// Seeds of control's tie-breaks and the sims' text.
    pub(crate) seed: u64,
    pub(crate) decode_ranks: u32,
    /// The prefill's prefix-cache capacity, tokens.
    pub(crate) prefill_cache_tokens: u64,
}

/// A server task and the way to stop it.
pub(crate) struct Server {
    name: &'static str,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    pub(crate) fn spawn<F>(name: &'static str, run: impl FnOnce(oneshot::Receiver<()>) -> F) -> Self
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        Self { name, stop, task: tokio::spawn(run(stopped)) }
    }

    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        let done = tokio::time::timeout(DEADLINE, self.task).await;
        done.with_context(|| format!("{} did not stop", self.name))?
            .with_context(|| format!("{} panicked", self.name))?
            .with_context(|| format!("{} failed", self.name))
    }
}

pub(crate) async fn until(stopped: oneshot::Receiver<()>) {
    let _ = stopped.await;
}

/// A running deployment.
pub(crate) struct Deployment {
    /// The proxy's base URL (what the replay sends to).
    pub(crate) proxy_url: String,
    /// The decode sim's base URL (its `/v1/loads` is sampled).
    pub(crate) decode_url: String,
    control_metrics_url: String,
    /// Stopped in this order: the proxy (closes its lease), control, the sims.
    servers: Vec<Server>,
    _files: [tempfile::NamedTempFile; 2],
}

fn sim_argv(port: u16, mode: &str, bootstrap_port: u16, spec: &Spec) -> Vec<String> {
    let mut argv: Vec<String> = [
        "infera-sim",
        "--host",
        "127.0.0.1",
        "--model-path",
        "zai-org/GLM-5.2",
        "--served-model-name",
        MODEL,
        "--disaggregation-mode",
        mode,
        "--page-size",
        "64",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "5",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "6",
        "--sim-log",
        "warn",
    ]
    .map(str::to_owned)
    .into();
    argv.extend(["--port".into(), port.to_string()]);
    argv.extend(["--disaggregation-bootstrap-port".into(), bootstrap_port.to_string()]);
    argv.extend([
        "--sim-seed".into(),
        spec.seed.to_string(),
        "--sim-speedup".into(),
        spec.speedup.to_string(),
    ]);
    argv
}

impl Deployment {
    /// Starts everything and waits (bounded) until the proxy routes.
    pub(crate) async fn start(spec: &Spec) -> anyhow::Result<Self> {
        let mut servers = Vec::new();
        // The prefill: TP1 × PP4 in the kit (one rank), 8k chunks, shortest-prefill-first.
        let params = tempfile::NamedTempFile::new()?;
        std::fs::write(params.path(), format!("prefix_cache_tokens = {}\n", spec.prefill_cache_tokens))?;
        let (http, bootstrap) =
            (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
        let (prefill_addr, bootstrap_port) = (http.local_addr()?, bootstrap.local_addr()?.port());
        let mut argv = sim_argv(prefill_addr.port(), "prefill", bootstrap_port, spec);
        argv.extend(
            [
                "--tp-size",
                "1",
                "--chunked-prefill-size",
                "8192",
                "--schedule-policy",
                "shortest-prefill-first",
            ]
            .map(str::to_owned),
        );
        argv.extend(["--sim-params".to_owned(), params.path().display().to_string()]);
        let config = infera_sim::SimConfig::from_argv(argv)?;
        let listeners = infera_sim::Listeners { http, bootstrap: Some(bootstrap) };
        servers.push(Server::spawn("prefill sim", move |rx| infera_sim::run(listeners, config, until(rx))));

        // The decode: TP 8 with DP attention over `decode_ranks` ranks, EAGLE 5/1/6.
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let decode_addr = http.local_addr()?;
        let mut argv = sim_argv(decode_addr.port(), "decode", bootstrap_port, spec);
        let ranks = spec.decode_ranks.to_string();
        argv.extend(["--tp-size", &ranks, "--dp-size", &ranks, "--enable-dp-attention"].map(str::to_owned));
        let config = infera_sim::SimConfig::from_argv(argv)?;
        let listeners = infera_sim::Listeners { http, bootstrap: None };
        servers.push(Server::spawn("decode sim", move |rx| infera_sim::run(listeners, config, until(rx))));

        let workers = tempfile::NamedTempFile::new()?;
        std::fs::write(
            workers.path(),
            format!(
                "[[workers]]\nid = 'prefill-0'\nrole = 'prefill'\nurl = 'http://{prefill_addr}'\nmodel = '{MODEL}'\nbootstrap_port = {bootstrap_port}\n\n\
                 [[workers]]\nid = 'decode-0'\nrole = 'decode'\nurl = 'http://{decode_addr}'\nmodel = '{MODEL}'\ndp_size = {}\n",
                spec.decode_ranks
            ),
        )?;
        let (grpc, metrics) =
            (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
        let (control_addr, metrics_addr) = (grpc.local_addr()?, metrics.local_addr()?);
        let mut argv =
            vec!["infera-control".to_owned(), "--workers".into(), workers.path().display().to_string()];
        argv.extend(["--seed".into(), spec.seed.to_string()]);
        argv.extend(spec.arm.control_flags());
        let config = infera_control::Config::try_from(infera_control::Args::try_parse_from(argv)?)?;
        let listeners = infera_control::Listeners { grpc, metrics };
        servers.push(Server::spawn("control", move |rx| infera_control::run(listeners, config, until(rx))));

        // A wide pick deadline: on a loaded 2-core machine a late pick must not fall back to the
        // proxy's local policy, which would not be the arm's.
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy_addr = listener.local_addr()?;
        let control = format!("http://{control_addr}");
        let argv = [
            "infera-proxy",
            "--control",
            &control,
            "--pick-timeout-ms",
            "5000",
            "--targets-refresh-ms",
            "200",
        ];
        let config = infera_proxy::Config::try_from(infera_proxy::Args::try_parse_from(argv)?)?;
        servers.push(Server::spawn("proxy", move |rx| infera_proxy::run(listener, config, until(rx))));
        servers.reverse();

        let deployment = Self {
            proxy_url: format!("http://{proxy_addr}"),
            decode_url: format!("http://{decode_addr}"),
            control_metrics_url: format!("http://{metrics_addr}/metrics"),
            servers,
            _files: [params, workers],
        };
        deployment.wait_ready().await?;
        Ok(deployment)
    }

    /// Until control holds the proxy's lease and the proxy lists the model (bounded): a pick
    /// before the lease would be routed by the proxy's local fallback, not by the arm.
    async fn wait_ready(&self) -> anyhow::Result<()> {
        poll("the deployment to be ready", async || {
            let control = get(&self.control_metrics_url).await.unwrap_or_default();
            let leased = counter_sum(&control, "infera_router_leases", "") >= 1.0;
            let ready = get(&format!("{}/readiness", self.proxy_url)).await.is_ok();
            let models = get(&format!("{}/v1/models", self.proxy_url)).await.unwrap_or_default();
            (leased && ready && models.contains(&format!("\"{MODEL}\""))).then_some(())
        })
        .await
    }

    /// Control's decode picks so far (`infera_router_picks_total{kind="decode"}`, all outcomes).
    pub(crate) async fn decode_picks(&self) -> anyhow::Result<f64> {
        let text = get(&self.control_metrics_url).await?;
        Ok(counter_sum(&text, "infera_router_picks_total", "kind=\"decode\""))
    }

    /// The proxy's picks made without control (`infera_proxy_fallback_picks_total`).
    pub(crate) async fn fallback_picks(&self) -> anyhow::Result<f64> {
        let text = get(&format!("{}/metrics", self.proxy_url)).await?;
        Ok(counter_sum(&text, "infera_proxy_fallback_picks_total", ""))
    }

    /// Stops every server, in order, each within a deadline.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        for server in self.servers {
            server.stop().await?;
        }
        Ok(())
    }
}

/// Calls `check` every 20 ms until it yields a value, for at most the deployment deadline.
pub(crate) async fn poll<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> anyhow::Result<T> {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        anyhow::ensure!(Instant::now() < end, "waited {DEADLINE:?} for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sum of a Prometheus counter's samples whose labels contain `labels`.
pub(crate) fn counter_sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#') && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, v| sum + v)
}

/// GET `url`: the body of a 2xx answer.
pub(crate) async fn get(url: &str) -> anyhow::Result<String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let resp = client.get(url.parse()?).await?;
    anyhow::ensure!(resp.status().is_success(), "GET {url}: {}", resp.status());
    Ok(String::from_utf8_lossy(&resp.into_body().collect().await?.to_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_by_label() {
        let text = "# HELP infera_router_picks_total Picks\n\
                    infera_router_picks_total{kind=\"decode\",mode=\"on\",outcome=\"ok\"} 7\n\
                    infera_router_picks_total{kind=\"prefill\",mode=\"on\",outcome=\"ok\"} 7\n\
                    infera_router_picks_total{kind=\"decode\",mode=\"on\",outcome=\"no_eligible_target\"} 1\n";
        assert_eq!(counter_sum(text, "infera_router_picks_total", "kind=\"decode\""), 8.0);
        assert_eq!(counter_sum("", "infera_router_picks_total", ""), 0.0);
    }
}

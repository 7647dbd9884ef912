//! One fresh deployment for a KV-routing arm, in this process, every socket on port 0: N prefill
//! sims that tokenize with the model directory's tokenizer and publish KV events (PUB + replay on
//! OS-picked ports), one decode sim, `infera-control` with the prefills' KV sockets in its workers
//! file (read from each sim's `/server_info.kv_events`, as a registrar would), and one
//! `infera-proxy` (with `--tokenizer` when the arm hashes prompts).

use std::path::Path;

use clap::Parser as _;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::study::deploy::{Server, counter_sum, get, poll, until};

/// The served model name.
pub(crate) const MODEL: &str = "m";

/// What to start.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) prefills: usize,
    pub(crate) page_size: u32,
    /// `--sim-speedup` of every sim.
    pub(crate) speedup: f64,
    pub(crate) seed: u64,
    /// Control's extra flags (the prefill policy).
    pub(crate) control_flags: Vec<String>,
    /// Whether the proxy tokenizes (and so sends page hashes).
    pub(crate) proxy_tokenizes: bool,
}

/// A running deployment.
pub(crate) struct Deployment {
    pub(crate) proxy_url: String,
    pub(crate) prefill_urls: Vec<String>,
    /// Control's gRPC URL.
    pub(crate) control_url: String,
    control_metrics_url: String,
    servers: Vec<Server>,
    _files: [tempfile::NamedTempFile; 2],
}

/// A sim's argv; `model` is the model directory for prefills (they tokenize like SGLang), a bare
/// name for the decode (its prompt count only feeds the step time; tokenizing there too would
/// spend the machine's two cores on nothing the study measures).
fn sim_argv(mode: &str, port: u16, bootstrap: u16, model: &Path, params: &Path, spec: &Spec) -> Vec<String> {
    let mut argv: Vec<String> =
        ["infera-sim", "--host", "127.0.0.1", "--served-model-name", MODEL, "--enable-cache-report"]
            .map(str::to_owned)
            .into();
    let dir = model.display().to_string();
    argv.extend(["--model-path".into(), dir, "--disaggregation-mode".into(), mode.into()]);
    argv.extend([
        "--port".into(),
        port.to_string(),
        "--disaggregation-bootstrap-port".into(),
        bootstrap.to_string(),
    ]);
    argv.extend([
        "--page-size".into(),
        spec.page_size.to_string(),
        "--sim-params".into(),
        params.display().to_string(),
    ]);
    argv.extend([
        "--sim-seed".into(),
        spec.seed.to_string(),
        "--sim-speedup".into(),
        spec.speedup.to_string(),
    ]);
    argv.extend(["--sim-log".into(), "warn".into()]);
    argv
}

impl Deployment {
    /// Starts everything and waits (bounded) until the proxy routes and control follows every
    /// prefill's KV events.
    pub(crate) async fn start(spec: &Spec, model_dir: &Path) -> anyhow::Result<Self> {
        let mut servers = Vec::new();
        // Caches large enough to hold the whole replay: the hit-ratio bound assumes no eviction.
        let params = tempfile::NamedTempFile::new()?;
        std::fs::write(params.path(), "prefix_cache_tokens = 100000000\n")?;
        let kv = r#"{"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0","topic":"kv"}"#;
        let mut toml = String::new();
        let mut prefill_urls = Vec::new();
        for i in 0..spec.prefills {
            let (http, bootstrap) =
                (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
            let (addr, bport) = (http.local_addr()?, bootstrap.local_addr()?.port());
            let mut argv = sim_argv("prefill", addr.port(), bport, model_dir, params.path(), spec);
            argv.extend(["--kv-events-config".into(), kv.into()]);
            let config = infera_sim::SimConfig::from_argv(argv)?;
            let listeners = infera_sim::Listeners { http, bootstrap: Some(bootstrap) };
            servers
                .push(Server::spawn("prefill sim", move |rx| infera_sim::run(listeners, config, until(rx))));
            let url = format!("http://{addr}");
            let info =
                poll("a prefill sim to answer", async || get(&format!("{url}/server_info")).await.ok())
                    .await?;
            let info: Value = serde_json::from_str(&info)?;
            let k = &info["kv_events"];
            toml += &format!(
                "[[workers]]\nid = 'prefill-{i}'\nrole = 'prefill'\nurl = '{url}'\nmodel = '{MODEL}'\nbootstrap_port = {bport}\n\
                 page_size = {}\nkv_events = {{ endpoint = 'tcp://127.0.0.1:{}', replay_endpoint = 'tcp://127.0.0.1:{}', topic = 'kv' }}\n\n",
                spec.page_size, k["endpoint_port_base"], k["replay_endpoint_port_base"]
            );
            prefill_urls.push(url);
        }
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let decode_addr = http.local_addr()?;
        let mut argv = sim_argv("decode", decode_addr.port(), 8998, Path::new(MODEL), params.path(), spec);
        argv.extend(["--dp-size", "4", "--enable-dp-attention"].map(str::to_owned));
        let config = infera_sim::SimConfig::from_argv(argv)?;
        let listeners = infera_sim::Listeners { http, bootstrap: None };
        servers.push(Server::spawn("decode sim", move |rx| infera_sim::run(listeners, config, until(rx))));
        toml += &format!(
            "[[workers]]\nid = 'decode-0'\nrole = 'decode'\nurl = 'http://{decode_addr}'\nmodel = '{MODEL}'\ndp_size = 4\npage_size = {}\n",
            spec.page_size
        );

        let workers = tempfile::NamedTempFile::new()?;
        std::fs::write(workers.path(), toml)?;
        let (grpc, metrics) =
            (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
        let (control_addr, metrics_addr) = (grpc.local_addr()?, metrics.local_addr()?);
        let mut argv =
            vec!["infera-control".to_owned(), "--workers".into(), workers.path().display().to_string()];
        argv.extend(["--seed".into(), spec.seed.to_string(), "--decode-input-demand".into(), "on".into()]);
        argv.extend(spec.control_flags.iter().cloned());
        let config = infera_control::Config::try_from(infera_control::Args::try_parse_from(argv)?)?;
        let listeners = infera_control::Listeners { grpc, metrics };
        servers.push(Server::spawn("control", move |rx| infera_control::run(listeners, config, until(rx))));

        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy_addr = listener.local_addr()?;
        let control = format!("http://{control_addr}");
        let tokenizer = model_dir.join("tokenizer.json").display().to_string();
        let mut argv = vec![
            "infera-proxy",
            "--control",
            &control,
            "--pick-timeout-ms",
            "5000",
            "--targets-refresh-ms",
            "200",
        ];
        if spec.proxy_tokenizes {
            argv.extend(["--tokenizer", &tokenizer]);
        }
        let config = infera_proxy::Config::try_from(infera_proxy::Args::try_parse_from(argv)?)?;
        servers.push(Server::spawn("proxy", move |rx| infera_proxy::run(listener, config, until(rx))));
        servers.reverse();

        let deployment = Self {
            proxy_url: format!("http://{proxy_addr}"),
            prefill_urls,
            control_url: format!("http://{control_addr}"),
            control_metrics_url: format!("http://{metrics_addr}/metrics"),
            servers,
            _files: [params, workers],
        };
        deployment.wait_ready(spec.prefills).await?;
        Ok(deployment)
    }

    /// Until control holds the proxy's lease, the proxy lists the model, and control has a
    /// subscriber per prefill that has caught up (bounded).
    async fn wait_ready(&self, prefills: usize) -> anyhow::Result<()> {
        poll("the deployment to be ready", async || {
            let control = get(&self.control_metrics_url).await.unwrap_or_default();
            let leased = counter_sum(&control, "infera_router_leases", "") >= 1.0;
            let following = counter_sum(&control, "infera_kv_subscribers", "") >= prefills as f64
                && counter_sum(&control, "infera_kv_batches_total", "") >= prefills as f64;
            let models = get(&format!("{}/v1/models", self.proxy_url)).await.unwrap_or_default();
            (leased && following && models.contains(&format!("\"{MODEL}\""))).then_some(())
        })
        .await
    }

    /// Every prefill's log: (prompt tokens, cached tokens, requests) of the legs that finished.
    pub(crate) async fn prefill_hits(&self) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        let mut out = Vec::new();
        for url in &self.prefill_urls {
            let body = get(&format!("{url}/sim/requests")).await?;
            let log: Value = serde_json::from_str(&body)?;
            let ok = log.as_array().into_iter().flatten().filter(|e| e["outcome"] == "ok");
            let (mut prompt, mut cached, mut n) = (0, 0, 0);
            for e in ok {
                prompt += e["prompt_tokens"].as_u64().unwrap_or(0);
                cached += e["cached_tokens"].as_u64().unwrap_or(0);
                n += 1;
            }
            out.push((prompt, cached, n));
        }
        Ok(out)
    }

    /// Stops every server, in order.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        for server in self.servers {
            server.stop().await?;
        }
        Ok(())
    }
}

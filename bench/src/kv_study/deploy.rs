//! One fresh deployment for a KV-routing arm, in this process, every socket on port 0: N prefill
//! sims that tokenize with the model directory's tokenizer and publish KV events (PUB + replay on
//! OS-picked ports), one decode sim, `infera-control` with the prefills' KV sockets in its workers
//! file (read from each sim's `/server_info.kv_events`, as a registrar would), and one
//! `infera-proxy` (with `--tokenizer` when the arm hashes prompts), started with the workspace's
//! test kit (`infera-testkit`).

use std::path::Path;
use std::time::Duration;

use infera_testkit::http::{get_ok, metric_sum};
use infera_testkit::{Cluster, ClusterSpec, ControlSpec, SimSpec, Workers};
use serde_json::Value;

/// The served model name.
pub(crate) const MODEL: &str = "m";
/// How long a deployment may take to become ready.
const DEADLINE: Duration = Duration::from_secs(30);

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
    cluster: Cluster,
}

impl Deployment {
    /// Starts everything and waits (bounded) until the proxy routes and control follows every
    /// prefill's KV events.
    pub(crate) async fn start(spec: &Spec, model_dir: &Path) -> anyhow::Result<Self> {
        let sim = |s: SimSpec| {
            s.page_size(spec.page_size)
                .extra(["--enable-cache-report"])
                .seed(spec.seed)
                .speedup(spec.speedup)
                .sim_flag("--sim-log", "warn")
                // Caches large enough to hold the whole replay: the hit-ratio bound assumes no
                // eviction.
                .params("prefix_cache_tokens = 100000000\n")
        };
        // The prefills tokenize with the model directory (as SGLang does) and publish KV events;
        // the decode gets a bare model name: its prompt count only feeds the step time, and
        // tokenizing there too would spend the machine's two cores on nothing the study measures.
        let mut sims: Vec<SimSpec> = (0..spec.prefills)
            .map(|i| {
                sim(SimSpec::prefill(&format!("prefill-{i}"), MODEL))
                    .model_path(model_dir.display().to_string())
                    .kv_events("kv")
            })
            .collect();
        sims.push(sim(SimSpec::decode("decode-0", MODEL, 4)).model_path(MODEL));
        let mut cluster = ClusterSpec::new(MODEL, sims);
        cluster.control = ControlSpec::new(Workers::None)
            .flags(["--decode-input-demand", "on"])
            .flags(spec.control_flags.iter().cloned());
        cluster.control.seed = Some(spec.seed);
        cluster.proxies = 1;
        cluster.proxy_flags = ["--pick-timeout-ms", "5000"].map(str::to_owned).into();
        if spec.proxy_tokenizes {
            cluster
                .proxy_flags
                .extend(["--tokenizer".to_owned(), model_dir.join("tokenizer.json").display().to_string()]);
        }
        let cluster = cluster.start().await?;
        let deployment = Self {
            proxy_url: cluster.proxies[0].url.clone(),
            prefill_urls: cluster.sims[..spec.prefills].iter().map(|s| s.url.clone()).collect(),
            control_url: cluster.control.url(),
            control_metrics_url: format!("http://{}/metrics", cluster.control.metrics_addr),
            cluster,
        };
        deployment.wait_following(spec.prefills).await?;
        Ok(deployment)
    }

    /// Until control has a subscriber per prefill that has caught up (bounded; the proxy's lease
    /// is held once `cluster.start` returns).
    async fn wait_following(&self, prefills: usize) -> anyhow::Result<()> {
        infera_testkit::poll(DEADLINE, "control to follow every prefill's KV events", async || {
            let control = get_ok(&self.control_metrics_url).await.unwrap_or_default();
            metric_sum(&control, "infera_kv_subscribers", "") >= prefills as f64
                && metric_sum(&control, "infera_kv_batches_total", "") >= prefills as f64
        })
        .await?;
        Ok(())
    }

    /// Every prefill's log: (prompt tokens, cached tokens, requests) of the legs that finished.
    pub(crate) async fn prefill_hits(&self) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        let mut out = Vec::new();
        for url in &self.prefill_urls {
            let body = get_ok(&format!("{url}/sim/requests")).await?;
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
        self.cluster.stop().await
    }
}

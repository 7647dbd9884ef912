//! One fresh 1P1D deployment in this process, every socket on port 0: a prefill sim, a decode
//! sim with 8 attention-DP ranks, `infera-control` with the arm's flags and a static workers
//! file, and one `infera-proxy`. Nothing is shared between arms: each gets new listeners, a
//! new control (empty ledger, counters at zero) and new engines (empty prefix caches). It is
//! started with the workspace's test kit (`infera-testkit`).
//!
//! The shape is the seeds' kit as the emulator takes it (`examples/sim_1p1d`): the prefill
//! chunks at 8k with shortest-prefill-first and carries the decode's EAGLE flags; the decode
//! runs TP 8 with DP attention over 8 ranks. The prefill's prefix cache stands for the kit's
//! write-back HiCache (250 GB per PP stage, 4 stages, at the sim's 70,272 KV bytes per token ≈
//! 14.2 M tokens) through `--sim-params`; every timing parameter keeps the sim's calibrated
//! default.

use std::time::Duration;

use infera_launcher::sglang::SchedulePolicy;
use infera_testkit::http::{get_ok, metric_sum};
use infera_testkit::{Cluster, ClusterSpec, ControlSpec, SimSpec, Workers};

use super::arm::Arm;

/// The served model name.
pub(crate) const MODEL: &str = "glm-5.2";
/// How long a deployment may take to become ready.
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

/// A running deployment.
pub(crate) struct Deployment {
    /// The proxy's base URL (what the replay sends to).
    pub(crate) proxy_url: String,
    /// The decode sim's base URL (its `/v1/loads` is sampled).
    pub(crate) decode_url: String,
    control_metrics_url: String,
    cluster: Cluster,
}

/// A sim of the seeds' kit: GLM-5.2 with 64-token pages and EAGLE 5/1/6 on both roles.
fn kit_sim(spec: SimSpec, study: &Spec) -> SimSpec {
    spec.model_path("zai-org/GLM-5.2")
        .page_size(64)
        .eagle(5, 1, 6)
        .seed(study.seed)
        .speedup(study.speedup)
        .sim_flag("--sim-log", "warn")
}

impl Deployment {
    /// Starts everything and waits (bounded) until the proxy routes.
    pub(crate) async fn start(spec: &Spec) -> anyhow::Result<Self> {
        // The prefill: TP1 × PP4 in the kit (one rank), 8k chunks, shortest-prefill-first.
        let prefill = kit_sim(SimSpec::prefill("prefill-0", MODEL), spec)
            .chunked_prefill(8192)
            .schedule_policy(SchedulePolicy::ShortestPrefillFirst)
            .params(format!("prefix_cache_tokens = {}\n", spec.prefill_cache_tokens));
        // The decode: TP 8 with DP attention over `decode_ranks` ranks, EAGLE 5/1/6.
        let decode = kit_sim(SimSpec::decode("decode-0", MODEL, spec.decode_ranks), spec);
        let mut cluster = ClusterSpec::new(MODEL, vec![prefill, decode]);
        cluster.control = ControlSpec::new(Workers::None).flags(spec.arm.control_flags());
        cluster.control.seed = Some(spec.seed);
        cluster.proxies = 1;
        // A wide pick deadline: on a loaded 2-core machine a late pick must not fall back to the
        // proxy's local policy, which would not be the arm's.
        cluster.proxy_flags = ["--pick-timeout-ms", "5000"].map(str::to_owned).into();
        let cluster = cluster.start().await?;
        let deployment = Self {
            proxy_url: cluster.proxies[0].url.clone(),
            decode_url: cluster.sim("decode-0").url.clone(),
            control_metrics_url: format!("http://{}/metrics", cluster.control.metrics_addr),
            cluster,
        };
        deployment.wait_leased().await?;
        Ok(deployment)
    }

    /// Until control holds the proxy's lease (bounded): a pick before the lease would be
    /// routed by the proxy's local fallback, not by the arm.
    async fn wait_leased(&self) -> anyhow::Result<()> {
        infera_testkit::poll(DEADLINE, "control to hold the proxy's lease", async || {
            let control = get_ok(&self.control_metrics_url).await.unwrap_or_default();
            metric_sum(&control, "infera_router_leases", "") >= 1.0
        })
        .await?;
        Ok(())
    }

    /// Control's decode picks so far (`infera_router_picks_total{kind="decode"}`, all outcomes).
    pub(crate) async fn decode_picks(&self) -> anyhow::Result<f64> {
        let text = get_ok(&self.control_metrics_url).await?;
        Ok(metric_sum(&text, "infera_router_picks_total", "kind=\"decode\""))
    }

    /// The proxy's picks made without control (`infera_proxy_fallback_picks_total`).
    pub(crate) async fn fallback_picks(&self) -> anyhow::Result<f64> {
        let text = get_ok(&format!("{}/metrics", self.proxy_url)).await?;
        Ok(metric_sum(&text, "infera_proxy_fallback_picks_total", ""))
    }

    /// Stops every server, in order (the proxy closes its lease first), each within a deadline.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.cluster.stop().await
    }
}

//! One fresh 1P1D deployment in this process, every socket on port 0: a prefill sim, a decode
//! sim with 8 attention-DP ranks, `infera-control` with the arm's flags and a static workers
//! file, and one `infera-proxy` — or, for an SMG arm, the same two sims behind one `smg`
//! process ([`super::smg`]) instead of control and the proxy. Nothing is shared between arms:
//! each gets new listeners, a new router (empty ledger, counters at zero) and new engines
//! (empty prefix caches). It is started with the workspace's test kit (`infera-testkit`).
//!
//! The shape is the seeds' kit as the emulator takes it (`examples/sim_1p1d`): the prefill
//! chunks at 8k with shortest-prefill-first and carries the decode's EAGLE flags; the decode
//! runs TP 8 with DP attention over 8 ranks. The prefill's prefix cache stands for the kit's
//! write-back HiCache (250 GB per PP stage, 4 stages, at the sim's 70,272 KV bytes per token ≈
//! 14.2 M tokens) through `--sim-params`; every timing parameter keeps the sim's calibrated
//! default.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use infera_launcher::sglang::SchedulePolicy;
use infera_testkit::http::{get_ok, metric_sum};
use infera_testkit::{Cluster, ClusterSpec, ControlSpec, Sim, SimSpec, Workers};

use super::arm::Arm;
use super::smg::{self, Counters, Launch, Smg, SmgArm};

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
    /// The `smg` an SMG arm runs (`--smg`; else the workspace's `.venv/bin/smg`).
    pub(crate) smg: Option<PathBuf>,
    /// Where an SMG arm's log goes.
    pub(crate) smg_log: PathBuf,
}

/// A running deployment.
pub(crate) struct Deployment {
    /// The router's base URL: the proxy's or SMG's (what the replay sends to).
    pub(crate) url: String,
    /// The decode sim's base URL (its `/v1/loads` is sampled).
    pub(crate) decode_url: String,
    router: Router,
}

/// What routes.
enum Router {
    /// infera: control and one proxy (the sims are the cluster's).
    Infera { cluster: Box<Cluster>, control_metrics_url: String },
    /// SMG in front of the two sims.
    Smg { smg: Box<Smg>, sims: Vec<Sim>, decode_ranks: u32 },
}

/// What the router says it did.
pub(crate) enum Routing {
    /// Control's decode picks before and after the replay, and the proxy's picks made without
    /// control (should be 0: they are not the arm's policy).
    Control { picks_at_start: f64, picks: f64, fallback_picks: f64 },
    /// SMG's counters after the replay, and its argv.
    Smg { counters: Counters, argv: Vec<String> },
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

/// The prefill and the decode sim, the same for every arm.
fn kit_sims(spec: &Spec) -> Vec<SimSpec> {
    // The prefill: TP1 × PP4 in the kit (one rank), 8k chunks, shortest-prefill-first.
    let prefill = kit_sim(SimSpec::prefill("prefill-0", MODEL), spec)
        .chunked_prefill(8192)
        .schedule_policy(SchedulePolicy::ShortestPrefillFirst)
        .params(format!("prefix_cache_tokens = {}\n", spec.prefill_cache_tokens));
    // The decode: TP 8 with DP attention over `decode_ranks` ranks, EAGLE 5/1/6.
    let decode = kit_sim(SimSpec::decode("decode-0", MODEL, spec.decode_ranks), spec);
    vec![prefill, decode]
}

impl Deployment {
    /// Starts everything and waits (bounded) until the router routes.
    pub(crate) async fn start(spec: &Spec) -> anyhow::Result<Self> {
        match spec.arm {
            Arm::Smg(arm) => Self::start_smg(spec, arm).await,
            _ => Self::start_infera(spec).await,
        }
    }

    async fn start_smg(spec: &Spec, arm: SmgArm) -> anyhow::Result<Self> {
        let program = smg::binary(spec.smg.as_deref())?;
        let mut sims = Vec::new();
        for s in kit_sims(spec) {
            sims.push(s.start().await?);
        }
        let (prefill, decode) = (&sims[0], &sims[1]);
        let launch = Launch {
            arm,
            prefill_url: prefill.url.clone(),
            bootstrap_port: prefill.bootstrap_port().context("the prefill sim has a bootstrap port")?,
            decode_url: decode.url.clone(),
            port: 0,
            metrics_port: 0,
        };
        let decode_url = decode.url.clone();
        let smg = Smg::start(&program, launch, MODEL, spec.decode_ranks, spec.smg_log.clone()).await?;
        Ok(Self {
            url: smg.url.clone(),
            decode_url,
            router: Router::Smg { smg: Box::new(smg), sims, decode_ranks: spec.decode_ranks },
        })
    }

    async fn start_infera(spec: &Spec) -> anyhow::Result<Self> {
        let mut cluster = ClusterSpec::new(MODEL, kit_sims(spec));
        cluster.control = ControlSpec::new(Workers::None).flags(spec.arm.control_flags());
        cluster.control.seed = Some(spec.seed);
        cluster.proxies = 1;
        // A wide pick deadline: on a loaded 2-core machine a late pick must not fall back to the
        // proxy's local policy, which would not be the arm's.
        cluster.proxy_flags = ["--pick-timeout-ms", "5000"].map(str::to_owned).into();
        let cluster = cluster.start().await?;
        let control_metrics_url = format!("http://{}/metrics", cluster.control.metrics_addr);
        wait_leased(&control_metrics_url).await?;
        Ok(Self {
            url: cluster.proxies[0].url.clone(),
            decode_url: cluster.sim("decode-0").url.clone(),
            router: Router::Infera { cluster: Box::new(cluster), control_metrics_url },
        })
    }

    /// Control's decode picks so far (`infera_router_picks_total{kind="decode"}`, all outcomes);
    /// 0 for SMG.
    pub(crate) async fn decode_picks(&self) -> anyhow::Result<f64> {
        let Router::Infera { control_metrics_url, .. } = &self.router else { return Ok(0.0) };
        let text = get_ok(control_metrics_url).await?;
        Ok(metric_sum(&text, "infera_router_picks_total", "kind=\"decode\""))
    }

    /// What the router did: control's picks since `picks_at_start` and the proxy's fallback
    /// picks (`infera_proxy_fallback_picks_total`), or SMG's counters.
    pub(crate) async fn routing(&self, picks_at_start: f64) -> anyhow::Result<Routing> {
        match &self.router {
            Router::Infera { .. } => {
                let text = get_ok(&format!("{}/metrics", self.url)).await?;
                Ok(Routing::Control {
                    picks_at_start,
                    picks: self.decode_picks().await?,
                    fallback_picks: metric_sum(&text, "infera_proxy_fallback_picks_total", ""),
                })
            }
            Router::Smg { smg, decode_ranks, .. } => {
                Ok(Routing::Smg { counters: smg.counters(*decode_ranks).await?, argv: smg.argv() })
            }
        }
    }

    /// Stops every server, in order (the proxy closes its lease first; SMG is killed before the
    /// sims), each within a deadline.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        match self.router {
            Router::Infera { cluster, .. } => cluster.stop().await,
            Router::Smg { smg, mut sims, .. } => {
                smg.stop().await?;
                for s in &mut sims {
                    s.stop().await?;
                }
                Ok(())
            }
        }
    }
}

/// Until control holds the proxy's lease (bounded): a pick before the lease would be routed by
/// the proxy's local fallback, not by the arm.
async fn wait_leased(control_metrics_url: &str) -> anyhow::Result<()> {
    infera_testkit::poll(DEADLINE, "control to hold the proxy's lease", async || {
        let control = get_ok(control_metrics_url).await.unwrap_or_default();
        metric_sum(&control, "infera_router_leases", "") >= 1.0
    })
    .await?;
    Ok(())
}

//! One fresh deployment of a scenario ([`super::scenario`]) in this process, every socket on
//! port 0: the prefill and decode sims, `infera-control` with the arm's flags and as many
//! `infera-proxy` as the scenario has routers — or, for an SMG arm, the same sims behind that
//! many `smg` processes ([`super::smg`]), each routing on its own. Nothing is shared between
//! arms: each gets new listeners, new routers (empty ledger, counters at zero) and new engines
//! (empty prefix caches). It is started with the workspace's test kit (`infera-testkit`).
//!
//! The shape is the original study's kit as the emulator takes it (`examples/sim_1p1d`): a prefill
//! chunks at 8k with shortest-prefill-first and carries the decode's EAGLE flags; a decode runs
//! TP = its ranks with DP attention. The prefill's prefix cache stands for the kit's
//! write-back HiCache (250 GB per PP stage, 4 stages, at the sim's 70,272 KV bytes per token ≈
//! 14.2 M tokens) through `--sim-params`; every timing parameter keeps the sim's calibrated
//! default.
//!
//! A decode that joins later runs from the start but is not in the pool: for infera the
//! workers register in a real etcd under leases (the production path) and the joining one
//! registers at its [`Change::Join`]; a drain is `Admin/DrainTarget`. For SMG both are SMG's
//! worker API.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context as _;
use infera_launcher::sglang::SchedulePolicy;
use infera_proto::pb;
use infera_testkit::http::{get_ok, metric_sum};
use infera_testkit::{Cluster, ClusterSpec, ControlSpec, Registration, Sim, SimSpec, Workers};
use tokio::sync::watch;

use super::arm::Arm;
use super::scenario::{Change, Topology};
use super::smg::{self, Counters, DecodeRanks, Launch, PrefillUrl, Smg, SmgArm};

/// The served model name.
pub(crate) const MODEL: &str = "glm-5.2";
/// How long a deployment (or a pool change) may take to become ready.
const DEADLINE: Duration = Duration::from_secs(30);
/// The workers' etcd lease TTL when a decode joins during the run.
const LEASE_TTL: Duration = Duration::from_secs(5);

/// What to start.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) arm: Arm,
    pub(crate) topology: Topology,
    /// The sims' `--sim-speedup`.
    pub(crate) speedup: f64,
    /// Seeds of control's tie-breaks and the sims' text.
    pub(crate) seed: u64,
    /// The prefills' prefix-cache capacity, tokens.
    pub(crate) prefill_cache_tokens: u64,
    /// The prefills' queue order.
    pub(crate) prefill_policy: SchedulePolicy,
    /// The `smg` an SMG arm runs (`--smg`; else the workspace's `.venv/bin/smg`).
    pub(crate) smg: Option<PathBuf>,
    /// The `sglang-router` a `sglang-router:` arm runs (`--sglang-router`; else the workspace's
    /// `.venv-sglang-router/bin/sglang-router`).
    pub(crate) sglang_router: Option<PathBuf>,
    /// Where an SMG arm's logs go: this path with `-N.log` for replica N.
    pub(crate) smg_log: PathBuf,
}

/// A decode of the deployment.
#[derive(Clone, Debug)]
pub(crate) struct Decode {
    /// Its worker id.
    pub(crate) name: String,
    /// Its base URL.
    pub(crate) url: String,
    ranks: u32,
}

/// A running deployment.
pub(crate) struct Deployment {
    /// The routers' base URLs: the proxies' or the SMGs' (what the replay sends to).
    pub(crate) urls: Vec<String>,
    /// The decodes in the pool now (their base URLs; what is sampled).
    pub(crate) pool: watch::Sender<Vec<String>>,
    decodes: Vec<Decode>,
    router: Router,
}

/// What routes.
enum Router {
    /// infera: control and the proxies (the sims in the pool at the start are the cluster's;
    /// `late` are the decodes that join, `joined` their registrations).
    Infera {
        cluster: Box<Cluster>,
        late: Vec<Sim>,
        joined: Mutex<Vec<Registration>>,
        control_metrics_url: String,
    },
    /// SMG replicas in front of the sims.
    Smg { smgs: Vec<Smg>, sims: Vec<Sim> },
}

/// What the routers say they did.
pub(crate) enum Routing {
    /// Control's decode picks before and after the replay, and the proxies' picks made without
    /// control (should be 0: they are not the arm's policy).
    Control { picks_at_start: f64, picks: f64, fallback_picks: f64 },
    /// The SMGs' counters after the replay, summed, and the first one's argv.
    Smg { counters: Counters, argv: Vec<String> },
}

/// The prefill queue orders the study runs: the kit's shortest-prefill-first, SGLang's aging
/// `hrrn`, and `fcfs`.
pub(crate) fn prefill_policy(name: &str) -> anyhow::Result<SchedulePolicy> {
    match name {
        "shortest-prefill-first" => Ok(SchedulePolicy::ShortestPrefillFirst),
        "hrrn" => Ok(SchedulePolicy::Hrrn),
        "fcfs" => Ok(SchedulePolicy::Fcfs),
        other => anyhow::bail!(
            "--prefill-schedule-policy {other:?}: the study runs shortest-prefill-first, hrrn or fcfs"
        ),
    }
}

/// A sim of the original study's kit: GLM-5.2 with 64-token pages and EAGLE 5/1/6 on both roles.
fn kit_sim(spec: SimSpec, study: &Spec) -> SimSpec {
    spec.model_path("zai-org/GLM-5.2")
        .page_size(64)
        .eagle(5, 1, 6)
        .seed(study.seed)
        .speedup(study.speedup)
        .sim_flag("--sim-log", "warn")
}

/// The prefills, then the decodes (with whether each is in the pool from the start).
fn kit_sims(spec: &Spec) -> Vec<(SimSpec, bool)> {
    let mut sims = Vec::new();
    for i in 0..spec.topology.prefills {
        // The prefill: TP1 × PP4 in the kit (one rank), 8k chunks, shortest-prefill-first (or
        // the study's `--prefill-schedule-policy`).
        let prefill = kit_sim(SimSpec::prefill(&format!("prefill-{i}"), MODEL), spec)
            .chunked_prefill(8192)
            .schedule_policy(spec.prefill_policy)
            .params(format!("prefix_cache_tokens = {}\n", spec.prefill_cache_tokens));
        sims.push((prefill, true));
    }
    for d in &spec.topology.decodes {
        // A decode: TP = its ranks with DP attention, EAGLE 5/1/6.
        let mut decode = kit_sim(SimSpec::decode(&d.name, MODEL, d.ranks), spec);
        if let Some(kv) = d.kv_tokens {
            decode = decode.extra(["--max-total-tokens".to_owned(), kv.to_string()]);
        }
        sims.push((decode, d.at_start));
    }
    sims
}

impl Deployment {
    /// Starts everything and waits (bounded) until every router routes.
    pub(crate) async fn start(spec: &Spec) -> anyhow::Result<Self> {
        match spec.arm {
            Arm::Smg(arm) => Self::start_smg(spec, arm).await,
            _ => Self::start_infera(spec).await,
        }
    }

    async fn start_smg(spec: &Spec, arm: SmgArm) -> anyhow::Result<Self> {
        let explicit = match arm.gateway {
            smg::Gateway::Smg => spec.smg.as_deref(),
            smg::Gateway::SglangRouter => spec.sglang_router.as_deref(),
        };
        let program = smg::binary(arm.gateway, explicit)?;
        let mut sims = Vec::new();
        for (s, _) in kit_sims(spec) {
            sims.push(s.start().await?);
        }
        // SMG starts with the decodes in the pool from the start; a joining one is added later.
        let (decodes, pool) = decodes_of(spec, sims.iter());
        let at_start = pool.borrow().clone();
        let prefills = sims[..spec.topology.prefills]
            .iter()
            .map(|p| {
                let bootstrap_port = p.bootstrap_port().context("a prefill sim has a bootstrap port")?;
                Ok(PrefillUrl { url: p.url.clone(), bootstrap_port })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let ranks: u32 = spec.topology.decodes.iter().filter(|d| d.at_start).map(|d| d.ranks).sum();
        let mut smgs = Vec::new();
        for i in 0..spec.topology.routers {
            let launch = Launch {
                arm,
                load_monitor_interval_s: smg::load_monitor_interval_s(spec.speedup),
                prefills: prefills.clone(),
                decodes: at_start.clone(),
                port: 0,
                metrics_port: 0,
                extra: Vec::new(),
                api_key: None,
                control_key: None,
            };
            let log = PathBuf::from(format!("{}-{i}.log", spec.smg_log.display()));
            smgs.push(Smg::start(&program, launch, MODEL, ranks, log).await?);
        }
        let urls = smgs.iter().map(|s| s.url.clone()).collect();
        Ok(Self { urls, pool, decodes, router: Router::Smg { smgs, sims } })
    }

    async fn start_infera(spec: &Spec) -> anyhow::Result<Self> {
        let (at_start, late): (Vec<_>, Vec<_>) = kit_sims(spec).into_iter().partition(|(_, a)| *a);
        let mut cluster = ClusterSpec::new(MODEL, at_start.into_iter().map(|(s, _)| s).collect());
        // Fair clocks: control reads the engines' /v1/loads at its default 100 ms of emulated time
        // (what the least-running arm picks on; the ledger arms' KV view), not 100 ms of wall.
        let mut flags = spec.arm.control_flags();
        flags.extend(["--engine-poll-ms".to_owned(), super::arm::engine_poll_ms(spec.speedup).to_string()]);
        // Fair clocks for admission too: its TTFT targets on control's clock are goodput's in
        // emulated time ([`super::classes`]).
        if spec.arm.admits() {
            let path = spec.smg_log.with_file_name("control-classes.toml");
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            std::fs::write(&path, super::classes::file(spec.speedup))
                .with_context(|| format!("writing {}", path.display()))?;
            flags.extend(["--service-classes".to_owned(), path.display().to_string()]);
        }
        cluster.control = ControlSpec::new(Workers::None).flags(flags);
        cluster.control.seed = Some(spec.seed);
        cluster.proxies = spec.topology.routers;
        // A decode that joins later registers in etcd, as every worker then does.
        cluster.etcd = (!late.is_empty()).then_some(LEASE_TTL);
        // A wide pick deadline: on a loaded 2-core machine a late pick must not fall back to the
        // proxy's local policy, which would not be the arm's.
        cluster.proxy_flags = ["--pick-timeout-ms", "5000"].map(str::to_owned).into();
        let cluster = cluster.start().await?;
        let mut late_sims = Vec::new();
        for (s, _) in late {
            late_sims.push(s.start().await?);
        }
        // `cluster.start` returned once every proxy holds its lease: no pick goes to the
        // proxy's local fallback, which would not be the arm's policy.
        let control_metrics_url = format!("http://{}/metrics", cluster.control.metrics_addr);
        let (decodes, pool) = decodes_of(spec, cluster.sims.iter().chain(&late_sims));
        let urls = cluster.proxy_urls();
        let router = Router::Infera {
            cluster: Box::new(cluster),
            late: late_sims,
            joined: Mutex::new(Vec::new()),
            control_metrics_url,
        };
        Ok(Self { urls, pool, decodes, router })
    }

    /// The prefill sims' URLs.
    pub(crate) fn prefill_urls(&self) -> Vec<String> {
        let sims: Vec<&Sim> = match &self.router {
            Router::Infera { cluster, .. } => cluster.sims.iter().collect(),
            Router::Smg { sims, .. } => sims.iter().collect(),
        };
        sims.into_iter()
            .filter(|s| s.record.role == infera_proto::types::Role::Prefill)
            .map(|s| s.url.clone())
            .collect()
    }

    /// Applies a change to the decode pool and waits (bounded) until the routers see it; the
    /// sampled pool follows. The decode it changed.
    pub(crate) async fn apply(&self, change: Change) -> anyhow::Result<Decode> {
        let (i, joins) = match change {
            Change::Join(i) => (i, true),
            Change::Drain(i) => (i, false),
        };
        let d = self.decodes.get(i).context("no such decode")?.clone();
        let mut pool = self.pool.borrow().clone();
        if joins {
            pool.push(d.url.clone());
        } else {
            pool.retain(|u| *u != d.url);
        }
        match &self.router {
            Router::Infera { cluster, late, joined, .. } if joins => {
                let sim = late.iter().find(|s| s.record.id.as_str() == d.name).context("a joining decode")?;
                let etcd = cluster.etcd.as_ref().context("etcd runs when a decode joins")?;
                let reg = Registration::start(vec![etcd.url()], sim.record.clone(), LEASE_TTL);
                joined.lock().expect("registrations").push(reg);
                let control = &cluster.control;
                infera_testkit::poll(DEADLINE, "control to list the joining decode", async || {
                    let n = control
                        .targets()
                        .await
                        .iter()
                        .filter(|t| t.target.as_ref().is_some_and(|x| x.worker_id == d.name))
                        .count();
                    (n == d.ranks as usize).then_some(())
                })
                .await?;
            }
            Router::Infera { cluster, .. } => {
                let request =
                    pb::DrainTargetRequest { worker_id: d.name.clone(), dp_rank: None, ..Default::default() };
                cluster.control.admin().await.drain_target(request).await.context("draining")?;
            }
            Router::Smg { smgs, .. } => {
                for smg in smgs {
                    if joins {
                        smg.add_decode(&d.url, d.ranks).await?;
                    } else {
                        smg.remove_decode(&d.url).await?;
                    }
                }
            }
        }
        self.pool.send_replace(pool);
        Ok(d)
    }

    /// The first decode pool's W in use and its fitted W (control's `GetConfig`); `None` for
    /// SMG or when control does not answer.
    pub(crate) async fn decode_weight(&self) -> Option<(f64, Option<f64>)> {
        let Router::Infera { cluster, .. } = &self.router else { return None };
        let config =
            cluster.control.admin().await.get_config(pb::GetConfigRequest {}).await.ok()?.into_inner();
        let pool = config.decode_pool_weights.first()?;
        Some((pool.request_weight, pool.fitted_weight))
    }

    /// Control's decode picks so far (`infera_router_picks_total{kind="decode"}`, all outcomes);
    /// 0 for SMG.
    pub(crate) async fn decode_picks(&self) -> anyhow::Result<f64> {
        let Router::Infera { control_metrics_url, .. } = &self.router else { return Ok(0.0) };
        let text = get_ok(control_metrics_url).await?;
        Ok(metric_sum(&text, "infera_router_picks_total", "kind=\"decode\""))
    }

    /// What the routers did: control's picks since `picks_at_start` and the proxies' fallback
    /// picks (`infera_proxy_fallback_picks_total`), or the SMGs' counters.
    pub(crate) async fn routing(&self, picks_at_start: f64) -> anyhow::Result<Routing> {
        match &self.router {
            Router::Infera { .. } => {
                let mut fallback_picks = 0.0;
                for url in &self.urls {
                    let text = get_ok(&format!("{url}/metrics")).await?;
                    fallback_picks += metric_sum(&text, "infera_proxy_fallback_picks_total", "");
                }
                Ok(Routing::Control { picks_at_start, picks: self.decode_picks().await?, fallback_picks })
            }
            Router::Smg { smgs, .. } => {
                let decodes: Vec<DecodeRanks> =
                    self.decodes.iter().map(|d| DecodeRanks { url: d.url.clone(), ranks: d.ranks }).collect();
                let mut all = Vec::new();
                for smg in smgs {
                    all.push(smg.counters(&decodes).await?);
                }
                let argv = smgs.first().map(Smg::argv).unwrap_or_default();
                Ok(Routing::Smg { counters: Counters::sum(&all), argv })
            }
        }
    }

    /// Stops every server, in order (the proxies close their leases first; the SMGs are killed
    /// before the sims), each within a deadline.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        match self.router {
            Router::Infera { cluster, mut late, joined, .. } => {
                for r in joined.into_inner().expect("registrations") {
                    r.stop().await;
                }
                cluster.stop().await?;
                for s in &mut late {
                    s.stop().await?;
                }
                Ok(())
            }
            Router::Smg { smgs, mut sims } => {
                for smg in smgs {
                    smg.stop().await?;
                }
                for s in &mut sims {
                    s.stop().await?;
                }
                Ok(())
            }
        }
    }
}

/// The scenario's decodes among `sims` (every sim of `spec`, started), and the pool of those
/// in it from the start.
fn decodes_of<'a>(
    spec: &Spec,
    sims: impl Iterator<Item = &'a Sim> + Clone,
) -> (Vec<Decode>, watch::Sender<Vec<String>>) {
    let decodes: Vec<Decode> = spec
        .topology
        .decodes
        .iter()
        .map(|d| {
            let sim = sims.clone().find(|s| s.record.id.as_str() == d.name).expect("every decode started");
            Decode { name: d.name.clone(), url: sim.url.clone(), ranks: d.ranks }
        })
        .collect();
    let at_start = spec.topology.decodes.iter().zip(&decodes).filter(|(d, _)| d.at_start);
    let pool = watch::Sender::new(at_start.map(|(_, d)| d.url.clone()).collect());
    (decodes, pool)
}

//! SMG (the Shepherd Model Gateway, `smg==1.13.0` in the project venv) as an arm of the decode
//! study: `smg:POLICY` runs `smg launch` in PD mode with DP awareness in front of the same sims
//! the infera arms get (one SMG per router of the scenario, each routing on its own), with
//! `--decode-policy POLICY` and every other flag at the default a user would run (loopback
//! only); `smg:POLICY:no-overload` adds `--disable-worker-overload-protection`, and
//! `smg:POLICY[:no-overload]:priority` its priority-aware admission scheduler
//! (`--priority-scheduler-enabled`, the built-in classes: each request's class comes from the
//! `x-smg-priority` header the replay sends beside infera's, `interactive` or `bulk`; its slots
//! are the fleet's `max_running_requests`, counted by each replica on its own). A decode that
//! joins is added through SMG's `POST /workers` (`dp_aware`), one that is drained removed
//! rank by rank through `DELETE /workers/{id}`: SMG's own worker API, as an operator uses it.
//!
//! `sglang-router:POLICY` runs SGLang's older router from PyPI (`sglang-router==0.3.2`, SMG's
//! ancestor, in `.venv-sglang-router`) the same way, with one difference: **not DP-aware**. Its
//! PD path with `--dp-aware` sends each request to the rank's name (`URL@rank`) as if it were a
//! host and every request fails (fixed upstream after 0.3.2), so a user of 0.3.2 runs PD without
//! it and each decode's ranks are chosen by SGLang's own DP controller (round robin). It has no
//! overload protection and no `least_load`; its `power_of_two` reads `/get_load`, which SGLang
//! 0.5.23 does not serve (nor does the sim), so it chooses blind.
//!
//! SMG refuses port 0 for its router and its metrics (`Port must be > 0`, and so does
//! sglang-router), so both ports are picked by binding port 0 on loopback and releasing it just
//! before it starts. Its load monitor and every other timer run on the wall clock. Fair clocks:
//! at the study's compression `c` SMG gets `--load-monitor-interval` = its default 10 s ÷ `c` (at
//! least its floor, 1 s), so at 10× it polls every 10 emulated seconds as in front of a real
//! engine ([`load_monitor_interval_s`]); its health timers keep their defaults.

mod counters;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
pub(crate) use counters::{Counters, DecodeRanks};
use infera_testkit::http::{get_as, get_ok, post_json, request};
use serde_json::json;

/// SMG's default `--load-monitor-interval`, wall-clock seconds.
pub(crate) const LOAD_MONITOR_INTERVAL_S: u64 = 10;
/// The shortest `--load-monitor-interval` SMG takes (whole seconds).
const LOAD_MONITOR_FLOOR_S: u64 = 1;

/// SMG's `--load-monitor-interval` at compression `speedup`: its default in emulated time, at
/// least its floor; `None` (the default, not passed) at 1×.
pub(crate) fn load_monitor_interval_s(speedup: f64) -> Option<u64> {
    let wall = (LOAD_MONITOR_INTERVAL_S as f64 / speedup).round() as u64;
    let wall = wall.max(LOAD_MONITOR_FLOOR_S);
    (wall != LOAD_MONITOR_INTERVAL_S).then_some(wall)
}
/// The variable naming the `smg` to run (else `.venv/bin/smg` of the workspace).
pub(crate) const SMG_VAR: &str = "INFERA_SMG";
/// The variable naming the `sglang-router` to run (else `.venv-sglang-router/bin/sglang-router`).
pub(crate) const SGLANG_ROUTER_VAR: &str = "INFERA_SGLANG_ROUTER";

/// Which gateway an arm runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gateway {
    /// `smg==1.13.0`, DP-aware.
    Smg,
    /// `sglang-router==0.3.2`, not DP-aware (see the module's notes).
    SglangRouter,
}

impl Gateway {
    /// The arm prefix: `smg` or `sglang-router`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Gateway::Smg => "smg",
            Gateway::SglangRouter => "sglang-router",
        }
    }

    fn dp_aware(self) -> bool {
        self == Gateway::Smg
    }
}
/// How long SMG may take to register the sims.
const READY: Duration = Duration::from_secs(30);
/// How long SMG may take to exit once killed.
const EXIT: Duration = Duration::from_secs(10);

/// SMG's `--decode-policy` values the study runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SmgPolicy {
    RoundRobin,
    PowerOfTwo,
    LeastLoad,
    CacheAware,
}

impl SmgPolicy {
    const ALL: [SmgPolicy; 4] =
        [SmgPolicy::RoundRobin, SmgPolicy::PowerOfTwo, SmgPolicy::LeastLoad, SmgPolicy::CacheAware];

    /// As SMG spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SmgPolicy::RoundRobin => "round_robin",
            SmgPolicy::PowerOfTwo => "power_of_two",
            SmgPolicy::LeastLoad => "least_load",
            SmgPolicy::CacheAware => "cache_aware",
        }
    }
}

/// One gateway arm: the gateway, its decode policy, whether SMG's worker overload protection
/// (on by default: a rank with ≥ 8 waiting requests or ≥ 0.8 KV usage is left out while
/// another is under) runs (sglang-router has none), and whether SMG admits through its
/// priority scheduler (off by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SmgArm {
    pub(crate) gateway: Gateway,
    pub(crate) policy: SmgPolicy,
    pub(crate) overload_protection: bool,
    pub(crate) priority_scheduler: bool,
}

impl SmgArm {
    /// `POLICY[:no-overload][:priority]` (what follows `smg:`).
    pub(crate) fn parse(rest: &str) -> Result<Self, String> {
        let (name, priority_scheduler) = match rest.strip_suffix(":priority") {
            Some(name) => (name, true),
            None => (rest, false),
        };
        let (name, overload_protection) = match name.strip_suffix(":no-overload") {
            Some(name) => (name, false),
            None => (name, true),
        };
        let policy = SmgPolicy::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
            let names: Vec<&str> = SmgPolicy::ALL.iter().map(|p| p.name()).collect();
            format!(
                "smg:{rest:?}: SMG's decode policy is one of {} (optionally :no-overload, then :priority)",
                names.join(", ")
            )
        })?;
        Ok(Self { gateway: Gateway::Smg, policy, overload_protection, priority_scheduler })
    }

    /// `POLICY` (what follows `sglang-router:`): round_robin, power_of_two or cache_aware.
    pub(crate) fn parse_sglang_router(rest: &str) -> Result<Self, String> {
        let policy = [SmgPolicy::RoundRobin, SmgPolicy::PowerOfTwo, SmgPolicy::CacheAware]
            .into_iter()
            .find(|p| p.name() == rest)
            .ok_or_else(|| {
                format!("sglang-router:{rest:?}: its decode policy is one of round_robin, power_of_two, cache_aware")
            })?;
        Ok(Self {
            gateway: Gateway::SglangRouter,
            policy,
            overload_protection: false,
            priority_scheduler: false,
        })
    }

    /// The `--arms` spelling back.
    pub(crate) fn spec(&self) -> String {
        let overload = match self.gateway {
            Gateway::Smg if !self.overload_protection => ":no-overload",
            _ => "",
        };
        let priority = if self.priority_scheduler { ":priority" } else { "" };
        format!("{}:{}{overload}{priority}", self.gateway.name(), self.policy.name())
    }
}

/// A prefill as SMG takes it: base URL and PD bootstrap port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PrefillUrl {
    pub(crate) url: String,
    pub(crate) bootstrap_port: u16,
}

/// What one SMG is started with.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub(crate) arm: SmgArm,
    /// `--load-monitor-interval` (wall seconds) when not SMG's default.
    pub(crate) load_monitor_interval_s: Option<u64>,
    pub(crate) prefills: Vec<PrefillUrl>,
    /// The decodes' base URLs (SMG finds their DP ranks with `--dp-aware`).
    pub(crate) decodes: Vec<String>,
    /// SMG's router port and its Prometheus port.
    pub(crate) port: u16,
    pub(crate) metrics_port: u16,
    /// Further flags, appended as given (the tenants bench's API keys and tenant limits).
    pub(crate) extra: Vec<String>,
    /// A serving-path API key the readiness check sends (`None`: the gateway asks for none).
    pub(crate) api_key: Option<String>,
    /// A control-plane API key for its worker list (SMG asks for one once it has serving keys).
    pub(crate) control_key: Option<String>,
}

impl Launch {
    /// `smg`'s argv, after the program.
    pub(crate) fn argv(&self) -> Vec<String> {
        let dp_aware = self.arm.gateway.dp_aware();
        let mut argv: Vec<String> =
            ["launch", "--host", "127.0.0.1", "--port", &self.port.to_string(), "--pd-disaggregation"]
                .map(str::to_owned)
                .into();
        for p in &self.prefills {
            argv.extend(["--prefill".to_owned(), p.url.clone(), p.bootstrap_port.to_string()]);
        }
        for d in &self.decodes {
            argv.extend(["--decode".to_owned(), d.clone()]);
        }
        argv.extend(["--decode-policy", self.arm.policy.name()].map(str::to_owned));
        if dp_aware {
            argv.push("--dp-aware".to_owned());
        }
        argv.extend(
            [
                "--prometheus-host",
                "127.0.0.1",
                "--prometheus-port",
                &self.metrics_port.to_string(),
                // Its per-request INFO lines cost CPU the 2-core replay needs; no routing effect.
                "--log-level",
                "warn",
            ]
            .map(str::to_owned),
        );
        if self.arm.gateway == Gateway::Smg {
            if !self.arm.overload_protection {
                argv.push("--disable-worker-overload-protection".to_owned());
            }
            if let Some(s) = self.load_monitor_interval_s {
                argv.extend(["--load-monitor-interval".to_owned(), s.to_string()]);
            }
            if self.arm.priority_scheduler {
                argv.push("--priority-scheduler-enabled".to_owned());
            }
        }
        argv.extend(self.extra.iter().cloned());
        argv
    }
}

/// The gateway's program: `explicit` (`--smg`/`INFERA_SMG`, `--sglang-router`/
/// `INFERA_SGLANG_ROUTER`), else the workspace's `.venv/bin/smg` or
/// `.venv-sglang-router/bin/sglang-router`.
///
/// # Errors
/// When it is not there, with how to get it.
pub(crate) fn binary(gateway: Gateway, explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let (default, package, flag, var) = match gateway {
        Gateway::Smg => ("../.venv/bin/smg", "smg==1.13.0 in .venv", "--smg", SMG_VAR),
        Gateway::SglangRouter => (
            "../.venv-sglang-router/bin/sglang-router",
            "sglang-router==0.3.2 in .venv-sglang-router",
            "--sglang-router",
            SGLANG_ROUTER_VAR,
        ),
    };
    let path =
        explicit.map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(default), Path::to_path_buf);
    anyhow::ensure!(
        path.is_file(),
        "{} is missing at {}: run `cargo xtask setup` (it installs {package}) or point {flag} / {var} at one",
        gateway.name(),
        path.display()
    );
    Ok(path)
}

/// Two loopback ports the OS picked at once (so not the same one twice), released for SMG to
/// bind (it cannot take port 0).
fn two_free_ports() -> anyhow::Result<[u16; 2]> {
    let (a, b) = (TcpListener::bind("127.0.0.1:0")?, TcpListener::bind("127.0.0.1:0")?);
    Ok([a.local_addr()?.port(), b.local_addr()?.port()])
}

/// A worker in SMG's `GET /workers`.
struct Listed {
    id: String,
    url: String,
    /// `prefill` or `decode`.
    worker_type: String,
    /// SMG says `status: ready`, sglang-router 0.3.2 `is_healthy: true`.
    ready: bool,
}

/// The workers the gateway at `base` lists in `GET /workers`, asked with `control_key` if any.
async fn list_workers(base: &str, control_key: Option<&str>) -> anyhow::Result<Vec<Listed>> {
    let url = format!("{base}/workers");
    let (status, body) = get_as(&url, control_key).await?;
    anyhow::ensure!(status.is_success(), "GET {url}: {status} {body}");
    let listed: serde_json::Value = serde_json::from_str(&body)?;
    Ok(listed["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| {
            Some(Listed {
                id: w["id"].as_str()?.to_owned(),
                url: w["url"].as_str()?.to_owned(),
                worker_type: w["worker_type"].as_str().unwrap_or_default().to_owned(),
                ready: w["status"] == "ready" || w["is_healthy"] == true,
            })
        })
        .collect())
}

/// A running SMG; killed on drop.
pub(crate) struct Smg {
    /// The router's base URL (what the replay sends to).
    pub(crate) url: String,
    metrics_url: String,
    launch: Launch,
    child: tokio::process::Child,
    log: PathBuf,
}

impl Smg {
    /// Starts `program` in front of the sims, its output in `log`, and waits (bounded) until
    /// it lists the model with every prefill and all `decode_ranks` decode ranks registered (a
    /// gateway that is not DP-aware: every decode).
    ///
    /// # Errors
    /// When it does not start, exits, or is not ready in time (with the tail of its log).
    pub(crate) async fn start(
        program: &Path,
        mut launch: Launch,
        model: &str,
        decode_ranks: u32,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        [launch.port, launch.metrics_port] = two_free_ports()?;
        let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = tokio::process::Command::new(program)
            .args(launch.argv())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let mut smg = Self {
            url: format!("http://127.0.0.1:{}", launch.port),
            metrics_url: format!("http://127.0.0.1:{}/metrics", launch.metrics_port),
            launch,
            child,
            log,
        };
        smg.wait_ready(model, decode_ranks).await?;
        Ok(smg)
    }

    /// Waits until it lists the model and every worker ready in `/workers`. Not by its
    /// `smg_worker_pool_size` gauge: with two prefills both SMG 1.13 and sglang-router 0.3.2
    /// report 1 there while `/workers` lists both, and sglang-router never corrects it.
    async fn wait_ready(&mut self, model: &str, decode_ranks: u32) -> anyhow::Result<()> {
        let (base, models_url) = (self.url.clone(), format!("{}/v1/models", self.url));
        let api_key = self.launch.api_key.clone();
        let api_key = api_key.as_deref();
        let control_key = self.launch.control_key.clone();
        let control_key = control_key.as_deref();
        let prefills = self.launch.prefills.len();
        let decodes = if self.launch.arm.gateway.dp_aware() {
            decode_ranks as usize
        } else {
            self.launch.decodes.len()
        };
        let child = &mut self.child;
        let waited = infera_testkit::poll(READY, "SMG to list the model with every worker", async || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(anyhow::anyhow!("SMG exited ({status})")));
            }
            let listed = get_as(&models_url, api_key)
                .await
                .is_ok_and(|(status, m)| status.is_success() && m.contains(&format!("\"{model}\"")));
            let workers = list_workers(&base, control_key).await.unwrap_or_default();
            let ready = |kind: &str| workers.iter().filter(|w| w.worker_type == kind && w.ready).count();
            (listed && ready("prefill") >= prefills && ready("decode") >= decodes).then_some(Ok(()))
        })
        .await;
        let why = match waited {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e,
            Err(e) => e.into(),
        };
        Err(why.context(format!(
            "SMG {:?}; its log {}:\n{}",
            self.launch.argv(),
            self.log.display(),
            self.log_tail()
        )))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// What SMG's metrics say it did so far.
    ///
    /// # Errors
    /// When its metrics do not answer.
    pub(crate) async fn counters(&self, decodes: &[DecodeRanks]) -> anyhow::Result<Counters> {
        let text = get_ok(&self.metrics_url).await.context("SMG's /metrics")?;
        Ok(Counters::parse(&text, decodes))
    }

    /// Adds a decode (`POST /workers`, DP-aware for SMG) and waits (bounded) until the gateway
    /// lists its `ranks` ranks ready (the decode itself when it is not DP-aware).
    ///
    /// # Errors
    /// When SMG refuses it or does not register its ranks in time.
    pub(crate) async fn add_decode(&self, url: &str, ranks: u32) -> anyhow::Result<()> {
        let dp_aware = self.launch.arm.gateway.dp_aware();
        let body = if dp_aware {
            json!({"url": url, "worker_type": "decode", "dp_aware": true})
        } else {
            json!({"url": url, "worker_type": "decode"})
        };
        let ranks = if dp_aware { ranks } else { 1 };
        let (status, answer) = post_json(&format!("{}/workers", self.url), &body).await?;
        anyhow::ensure!(status.is_success(), "SMG POST /workers {url}: {status} {answer}");
        infera_testkit::poll(READY, "SMG to list the added decode's ranks", async || {
            let listed = self.ranks_of(url).await.ok()?;
            (listed.iter().filter(|w| w.ready).count() == ranks as usize).then_some(())
        })
        .await?;
        Ok(())
    }

    /// Removes every rank of a decode (`DELETE /workers/{id}` for each `URL@rank` SMG lists)
    /// and waits (bounded) until SMG lists none. What the decode holds runs on: its streams
    /// are open connections.
    ///
    /// # Errors
    /// When SMG's worker list does not answer or a removal is refused.
    pub(crate) async fn remove_decode(&self, url: &str) -> anyhow::Result<()> {
        for w in self.ranks_of(url).await? {
            let (status, _) =
                request(http::Method::DELETE, &format!("{}/workers/{}", self.url, w.id), None).await?;
            anyhow::ensure!(status.is_success(), "SMG DELETE /workers/{}: {status}", w.id);
        }
        infera_testkit::poll(READY, "SMG to list none of the removed decode's ranks", async || {
            self.ranks_of(url).await.ok()?.is_empty().then_some(())
        })
        .await?;
        Ok(())
    }

    /// The workers SMG lists for the decode at `url` (one per DP rank, `URL@rank`).
    async fn ranks_of(&self, url: &str) -> anyhow::Result<Vec<Listed>> {
        let prefix = format!("{url}@");
        let mut listed = list_workers(&self.url, self.launch.control_key.as_deref()).await?;
        listed.retain(|w| w.url == url || w.url.starts_with(&prefix));
        Ok(listed)
    }

    /// Its argv.
    pub(crate) fn argv(&self) -> Vec<String> {
        self.launch.argv()
    }

    /// Kills it (SIGKILL: what is still in flight was cut by the replay) and reaps it.
    ///
    /// # Errors
    /// When it does not exit in time.
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        self.child.start_kill().context("killing SMG")?;
        tokio::time::timeout(EXIT, self.child.wait()).await.context("SMG did not exit")??;
        Ok(())
    }
}

#[cfg(test)]
mod tests;

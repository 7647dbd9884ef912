//! SMG (the Shepherd Model Gateway, `smg==1.13.0` in the project venv) as an arm of the decode
//! study: `smg:POLICY` runs `smg launch` in PD mode with DP awareness in front of the same sims
//! the infera arms get (one SMG per router of the scenario, each routing on its own), with
//! `--decode-policy POLICY` and every other flag at the default a user would run (loopback
//! only); `smg:POLICY:no-overload` adds `--disable-worker-overload-protection`. A decode that
//! joins is added through SMG's `POST /workers` (`dp_aware`), one that is drained removed
//! rank by rank through `DELETE /workers/{id}`: SMG's own worker API, as an operator uses it.
//!
//! SMG refuses port 0 for its router and its metrics (`Port must be > 0`), so both ports are
//! picked by binding port 0 on loopback and releasing it just before SMG starts. Its load
//! monitor and every other timer run on the wall clock: at the study's 25× compression its
//! default 10 s load poll is 250 emulated seconds.

mod counters;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
pub(crate) use counters::{Counters, DecodeRanks};
use infera_testkit::http::{get_json, get_ok, metric_sum, post_json, request};
use serde_json::json;

/// SMG's default `--load-monitor-interval`, wall-clock seconds.
pub(crate) const LOAD_MONITOR_INTERVAL_S: f64 = 10.0;
/// The variable naming the `smg` to run (else `.venv/bin/smg` of the workspace).
pub(crate) const SMG_VAR: &str = "INFERA_SMG";
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

/// One SMG arm: its decode policy, and whether its worker overload protection (on by default:
/// a rank with ≥ 8 waiting requests or ≥ 0.8 KV usage is left out while another is under) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SmgArm {
    pub(crate) policy: SmgPolicy,
    pub(crate) overload_protection: bool,
}

impl SmgArm {
    /// `POLICY` or `POLICY:no-overload` (what follows `smg:`).
    pub(crate) fn parse(rest: &str) -> Result<Self, String> {
        let (name, overload_protection) = match rest.strip_suffix(":no-overload") {
            Some(name) => (name, false),
            None => (rest, true),
        };
        let policy = SmgPolicy::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
            let names: Vec<&str> = SmgPolicy::ALL.iter().map(|p| p.name()).collect();
            format!(
                "smg:{rest:?}: SMG's decode policy is one of {} (optionally :no-overload)",
                names.join(", ")
            )
        })?;
        Ok(Self { policy, overload_protection })
    }

    /// The `--arms` spelling back.
    pub(crate) fn spec(&self) -> String {
        let suffix = if self.overload_protection { "" } else { ":no-overload" };
        format!("smg:{}{suffix}", self.policy.name())
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
    pub(crate) prefills: Vec<PrefillUrl>,
    /// The decodes' base URLs (SMG finds their DP ranks with `--dp-aware`).
    pub(crate) decodes: Vec<String>,
    /// SMG's router port and its Prometheus port.
    pub(crate) port: u16,
    pub(crate) metrics_port: u16,
}

impl Launch {
    /// `smg`'s argv, after the program.
    pub(crate) fn argv(&self) -> Vec<String> {
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
        argv.extend(
            [
                "--decode-policy",
                self.arm.policy.name(),
                "--dp-aware",
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
        if !self.arm.overload_protection {
            argv.push("--disable-worker-overload-protection".to_owned());
        }
        argv
    }
}

/// The `smg` to run: `explicit` (`--smg`, `INFERA_SMG`), else `.venv/bin/smg` of the workspace.
///
/// # Errors
/// When it is not there, with how to get it.
pub(crate) fn binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = explicit
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/smg"), Path::to_path_buf);
    anyhow::ensure!(
        path.is_file(),
        "SMG is missing at {}: run `cargo xtask setup` (it installs smg==1.13.0 in .venv) or point --smg / {SMG_VAR} at an smg",
        path.display()
    );
    Ok(path)
}

/// A loopback port the OS picked, released for SMG to bind (it cannot take port 0).
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A worker in SMG's `GET /workers`.
struct Listed {
    id: String,
    ready: bool,
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
    /// it lists the model with every prefill and all `decode_ranks` decode ranks registered.
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
        launch.port = free_port()?;
        launch.metrics_port = free_port()?;
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

    async fn wait_ready(&mut self, model: &str, decode_ranks: u32) -> anyhow::Result<()> {
        let (models_url, metrics_url) = (format!("{}/v1/models", self.url), self.metrics_url.clone());
        let prefills = self.launch.prefills.len() as f64;
        let child = &mut self.child;
        let waited = infera_testkit::poll(READY, "SMG to list the model with every worker", async || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(anyhow::anyhow!("SMG exited ({status})")));
            }
            let listed = get_ok(&models_url).await.is_ok_and(|m| m.contains(&format!("\"{model}\"")));
            let metrics = get_ok(&metrics_url).await.unwrap_or_default();
            let pool =
                |kind: &str| metric_sum(&metrics, "smg_worker_pool_size", &format!("worker_type=\"{kind}\""));
            (listed && pool("prefill") >= prefills && pool("decode") >= f64::from(decode_ranks))
                .then_some(Ok(()))
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

    /// Adds a decode (`POST /workers`, DP-aware) and waits (bounded) until SMG lists its
    /// `ranks` ranks ready.
    ///
    /// # Errors
    /// When SMG refuses it or does not register its ranks in time.
    pub(crate) async fn add_decode(&self, url: &str, ranks: u32) -> anyhow::Result<()> {
        let body = json!({"url": url, "worker_type": "decode", "dp_aware": true});
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
        let listed = get_json(&format!("{}/workers", self.url)).await?;
        let prefix = format!("{url}@");
        Ok(listed["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| {
                let (id, wurl) = (w["id"].as_str()?, w["url"].as_str()?);
                (wurl == url || wurl.starts_with(&prefix))
                    .then(|| Listed { id: id.to_owned(), ready: w["status"] == "ready" })
            })
            .collect())
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
mod tests {
    use super::*;

    #[test]
    fn arms_parse_and_map_to_smg_argv() {
        let arm = SmgArm::parse("least_load").unwrap();
        assert_eq!(arm, SmgArm { policy: SmgPolicy::LeastLoad, overload_protection: true });
        let off = SmgArm::parse("cache_aware:no-overload").unwrap();
        assert_eq!(off, SmgArm { policy: SmgPolicy::CacheAware, overload_protection: false });
        assert_eq!((arm.spec(), off.spec()), ("smg:least_load".into(), "smg:cache_aware:no-overload".into()));
        for p in SmgPolicy::ALL {
            assert_eq!(SmgArm::parse(p.name()).unwrap().policy, p);
        }
        assert!(SmgArm::parse("fastest").unwrap_err().contains("round_robin, power_of_two"));
        assert!(SmgArm::parse("least_load:overload").is_err() && SmgArm::parse("").is_err());

        let launch = Launch {
            arm,
            prefills: vec![PrefillUrl { url: "http://127.0.0.1:4001".into(), bootstrap_port: 4002 }],
            decodes: vec!["http://127.0.0.1:4003".into()],
            port: 4004,
            metrics_port: 4005,
        };
        assert_eq!(
            launch.argv().join(" "),
            "launch --host 127.0.0.1 --port 4004 --pd-disaggregation --prefill http://127.0.0.1:4001 4002 \
             --decode http://127.0.0.1:4003 --decode-policy least_load --dp-aware --prometheus-host 127.0.0.1 \
             --prometheus-port 4005 --log-level warn"
        );
        let off = Launch { arm: off, ..launch };
        assert_eq!(off.argv().last().map(String::as_str), Some("--disable-worker-overload-protection"));
        assert_eq!(off.argv()[12], "cache_aware");
    }

    #[test]
    fn a_missing_smg_says_how_to_get_it() {
        let e = binary(Some(Path::new("/nonexistent/smg"))).unwrap_err().to_string();
        assert!(e.contains("cargo xtask setup") && e.contains(SMG_VAR), "{e}");
    }
}

//! One failover, watched: the leader is SIGKILLed and every surviving replica is polled every
//! [`POLL`] until the new leader has
//!
//! - **elected**: answers `Admin/GetConfig` itself as `leader`; the instant is the answer's
//!   `leading_since` (its wall clock, this machine's), so it does not depend on the poll;
//! - **booked its first pick**: its `infera_router_picks_total{outcome="ok"}` has grown since
//!   the kill (read from its `/metrics`; live, not the once-a-second gauges);
//! - **warm**: `GetConfig` reports `leadership.warm` (computed when asked: every proxy the old
//!   leader listed in etcd has re-declared, or a lease TTL has passed);
//! - **matched the decode sim**: the held requests of its decode targets (`Admin/ListTargets`)
//!   equal what the decode sim runs and queues (`/v1/loads`: `num_running_reqs` +
//!   `num_waiting_reqs`, which counts SGLang's prealloc and transfer queues), both read in one
//!   poll.
//!
//! Then the killed replica is started again on its addresses and the wait is for it to follow:
//! its `GetConfig` is forwarded to the new leader (the answer names the new leader's URL).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use infera_proto::pb::{self, admin_client::AdminClient};
use infera_testkit::http::{get_ok, metric_sum};
use infera_testkit::{Replicas, Sim};
use tonic::transport::{Channel, Endpoint};

/// How often the replicas are polled.
const POLL: Duration = Duration::from_millis(10);
/// How long a failover may take before the run fails.
const DEADLINE: Duration = Duration::from_secs(30);
/// How long the ledger may take to match the sim before that measure is given up.
const MATCH_DEADLINE: Duration = Duration::from_secs(10);
/// One probe call's deadline (a replica that does not answer in time is asked again next poll).
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// What one failover took, from the kill.
#[derive(Clone, Debug)]
pub(crate) struct Failover {
    pub(crate) killed: usize,
    pub(crate) leader: usize,
    pub(crate) elected: Duration,
    pub(crate) first_pick: Duration,
    pub(crate) warm: Duration,
    /// `None`: not matched within [`MATCH_DEADLINE`].
    pub(crate) matched: Option<Duration>,
    /// Legs re-declared to the new leader by the time it was warm: booked by the old leader,
    /// and picked locally by a proxy meanwhile.
    pub(crate) redeclared: (f64, f64),
    /// Picks the proxies made without control, from the kill until the killed replica follows.
    pub(crate) local_picks: f64,
    /// From the restart of the killed replica until it follows the new leader.
    pub(crate) rejoined: Duration,
}

/// Persistent Admin channels to every replica (reconnecting on their own after a restart).
#[derive(Debug)]
pub(crate) struct Probe {
    urls: Vec<String>,
    /// The proxies' base URLs.
    proxies: Vec<String>,
    metrics: Vec<String>,
    admins: Vec<AdminClient<Channel>>,
}

impl Probe {
    pub(crate) fn new(replicas: &Replicas, proxies: Vec<String>) -> anyhow::Result<Self> {
        let mut admins = Vec::new();
        for c in &replicas.controls {
            let endpoint =
                Endpoint::from_shared(c.url())?.connect_timeout(CALL_TIMEOUT).timeout(CALL_TIMEOUT);
            admins.push(AdminClient::new(endpoint.connect_lazy()));
        }
        Ok(Self {
            urls: replicas.controls.iter().map(infera_testkit::Control::url).collect(),
            proxies,
            metrics: replicas.controls.iter().map(|c| format!("http://{}/metrics", c.metrics_addr)).collect(),
            admins,
        })
    }

    /// The leadership in the answer of replica `i`'s `GetConfig` (forwarded to the leader when
    /// `i` follows: then it names the leader's URL).
    async fn leadership(&self, i: usize) -> Option<pb::Leadership> {
        let answer = self.admins[i].clone().get_config(pb::GetConfigRequest::default()).await.ok()?;
        answer.into_inner().leadership
    }

    /// Replica `i`'s leadership when it leads itself.
    async fn leading(&self, i: usize) -> Option<pb::Leadership> {
        self.leadership(i).await.filter(|l| l.role == "leader" && l.url == self.urls[i])
    }

    async fn metrics_text(&self, i: usize) -> Option<String> {
        tokio::time::timeout(CALL_TIMEOUT, get_ok(&self.metrics[i])).await.ok()?.ok()
    }

    /// Replica `i`'s successful picks so far (0 when it does not answer).
    async fn picks_ok(&self, i: usize) -> f64 {
        let text = self.metrics_text(i).await.unwrap_or_default();
        metric_sum(&text, "infera_router_picks_total", "outcome=\"ok\"")
    }

    /// The proxies' picks made without control so far (all kinds), summed.
    pub(crate) async fn local_picks(&self) -> f64 {
        let mut sum = 0.0;
        for p in &self.proxies {
            let text = get_ok(&format!("{p}/metrics")).await.unwrap_or_default();
            sum += metric_sum(&text, "infera_proxy_fallback_picks_total", "");
        }
        sum
    }

    /// Held requests on replica `i`'s decode targets.
    async fn held_decode(&self, i: usize) -> Option<u64> {
        let req = pb::ListTargetsRequest { role: pb::Role::Decode as i32, ..Default::default() };
        let rows = self.admins[i].clone().list_targets(req).await.ok()?.into_inner().targets;
        Some(rows.iter().map(|t| t.held_requests).sum())
    }

    /// Whether replica `i`'s decode ledger holds what the decode sim runs and queues.
    async fn matches(&self, i: usize, decode: &Sim) -> bool {
        let Some(held) = self.held_decode(i).await else { return false };
        held == sim_holding(decode).await
    }

    /// SIGKILLs `leader`, watches the takeover, restarts the killed replica and waits until it
    /// follows.
    pub(crate) async fn failover(
        &self,
        replicas: &mut Replicas,
        leader: usize,
        decode: &Sim,
    ) -> anyhow::Result<Failover> {
        let others: Vec<usize> = (0..self.urls.len()).filter(|&j| j != leader).collect();
        let mut picks_before = vec![0.0; self.urls.len()];
        for &j in &others {
            picks_before[j] = self.picks_ok(j).await;
        }
        let local_before = self.local_picks().await;
        let (t0, wall0) = (Instant::now(), SystemTime::now());
        replicas.kill(leader);
        let (mut new, mut elected, mut first_pick, mut warm, mut matched) = (None, None, None, None, None);
        let mut redeclared = (0.0, 0.0);
        loop {
            let now = Instant::now();
            anyhow::ensure!(
                now - t0 < DEADLINE,
                "no warm leader booking picks within {DEADLINE:?} of the kill"
            );
            if new.is_none() {
                for &j in &others {
                    if let Some(l) = self.leading(j).await {
                        new = Some(j);
                        // When it took over, by its wall clock (this machine's), from the kill.
                        elected = Some(l.leading_since.map_or(now - t0, |t| {
                            let since =
                                UNIX_EPOCH + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32);
                            since.duration_since(wall0).unwrap_or_default()
                        }));
                        break;
                    }
                }
            }
            if let Some(j) = new {
                if first_pick.is_none() && self.picks_ok(j).await > picks_before[j] {
                    first_pick = Some(t0.elapsed());
                }
                if warm.is_none() && self.leading(j).await.is_some_and(|l| l.warm) {
                    warm = Some(t0.elapsed());
                    let text = self.metrics_text(j).await.unwrap_or_default();
                    let legs = |origin| {
                        metric_sum(&text, "infera_router_redeclared_total", &format!("origin=\"{origin}\""))
                    };
                    redeclared = (legs("control"), legs("fallback"));
                }
                if matched.is_none() && t0.elapsed() < MATCH_DEADLINE && self.matches(j, decode).await {
                    matched = Some(t0.elapsed());
                }
                let match_done = matched.is_some() || t0.elapsed() >= MATCH_DEADLINE;
                if first_pick.is_some() && warm.is_some() && match_done {
                    break;
                }
            }
            tokio::time::sleep(POLL).await;
        }
        let new = new.expect("the loop ends with a leader");

        // The restart waits for the process's listening line on this thread.
        let t1 = Instant::now();
        tokio::task::block_in_place(|| replicas.restart(leader))?;
        let follows = infera_testkit::poll(DEADLINE, "the restarted replica to follow", async || {
            self.leadership(leader).await.filter(|l| l.url == self.urls[new] && l.role == "leader")
        });
        follows.await?;
        let rejoined = t1.elapsed();
        Ok(Failover {
            killed: leader,
            leader: new,
            elected: elected.expect("set with the leader"),
            first_pick: first_pick.expect("the loop ends with it"),
            warm: warm.expect("the loop ends with it"),
            matched,
            redeclared,
            local_picks: self.local_picks().await - local_before,
            rejoined,
        })
    }

    /// The replica that leads now (bounded wait).
    pub(crate) async fn leader(&self) -> anyhow::Result<usize> {
        Ok(infera_testkit::poll(DEADLINE, "a leader", async || {
            for j in 0..self.urls.len() {
                if self.leading(j).await.is_some() {
                    return Some(j);
                }
            }
            None
        })
        .await?)
    }

    /// Waits (bounded) until replica `i` leads with a warm ledger.
    pub(crate) async fn wait_warm(&self, i: usize) -> anyhow::Result<()> {
        infera_testkit::poll(DEADLINE, "the leader's ledger to be warm", async || {
            self.leading(i).await.is_some_and(|l| l.warm)
        })
        .await?;
        Ok(())
    }

    /// Whether the leader's decode ledger matches the sim now.
    pub(crate) async fn matches_now(&self, leader: usize, decode: &Sim) -> bool {
        self.matches(leader, decode).await
    }
}

/// What the decode sim runs and queues, summed over its ranks.
async fn sim_holding(decode: &Sim) -> u64 {
    let Ok(v) = decode.get_json("/v1/loads").await else { return u64::MAX };
    let count = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap_or(0);
    let ranks = v["loads"].as_array().cloned().unwrap_or_default();
    ranks.iter().map(|r| count(r, "num_running_reqs") + count(r, "num_waiting_reqs")).sum()
}

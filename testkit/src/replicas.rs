//! Several `infera-control` processes electing a leader through one etcd: started, found out
//! (which one leads), killed, restarted, paused and resumed — each optionally inside a network
//! namespace of its own ([`crate::netns`]) so its link to etcd can be cut for real while the
//! proxies still reach it.

use std::time::Duration;

use infera_proto::pb;

use crate::control::{Control, ControlSpec, Workers};
use crate::eventually::poll;
use crate::netns::Netns;

/// How long an election may take (a leader lease TTL or two, on a loaded machine).
pub const ELECTED: Duration = Duration::from_secs(30);

/// The replicas.
#[derive(Debug)]
pub struct Replicas {
    /// The controls, in start order.
    pub controls: Vec<Control>,
    /// Their namespaces (when started in them), in the same order.
    pub netns: Vec<Netns>,
}

impl Replicas {
    /// Starts `n` controls on etcd at `etcd` with `flags` (and seed 7), each in a namespace of its
    /// own when `netns`.
    ///
    /// # Errors
    /// When a control or a namespace cannot be started.
    pub async fn start(etcd: &str, n: usize, flags: &[&str], netns: bool) -> anyhow::Result<Self> {
        let mut replicas = Self { controls: Vec::new(), netns: Vec::new() };
        for _ in 0..n {
            let spec = ControlSpec::new(Workers::None).etcd(etcd).flags(flags.iter().copied());
            let control = if netns {
                let ns = Netns::create()?;
                let control = spec.spawn_in(Some((&ns.name, ns.inner.into()))).await?;
                replicas.netns.push(ns);
                control
            } else {
                spec.spawn().await?
            };
            replicas.controls.push(control);
        }
        Ok(replicas)
    }

    /// Every replica's URL, comma-joined: a proxy's `--control`.
    pub fn urls(&self) -> String {
        self.controls.iter().map(Control::url).collect::<Vec<_>>().join(",")
    }

    /// The leadership replica `i` reports (`GetConfig` answered by itself, on its Admin socket;
    /// `None` when it does not answer, or forwards to a leader elsewhere).
    pub async fn leadership(&self, i: usize) -> Option<pb::Leadership> {
        leadership_at(self.controls[i].admin_url(), self.controls[i].url()).await
    }

    /// Whether replica `i` says it leads (its `infera_router_leader` gauge, set every second);
    /// `None` when it does not answer.
    pub async fn leads(&self, i: usize) -> Option<bool> {
        let url = format!("http://{}/metrics", self.controls[i].metrics_addr);
        let text =
            tokio::time::timeout(Duration::from_secs(1), crate::http::get_ok(&url)).await.ok()?.ok()?;
        let line = text.lines().find(|l| l.starts_with("infera_router_leader "))?;
        Some(line.rsplit(' ').next()? == "1")
    }

    /// The replica that leads now, if one answers as leader. All are asked at once and the first
    /// leader to answer wins: asked one after another, a paused or restarting replica cost its full
    /// timeout before the next was asked, so a caller polling for a moment (a ledger that matches
    /// the engine under load) saw one sample a second instead of one every few milliseconds.
    pub async fn leader(&self) -> Option<usize> {
        let mut asks = tokio::task::JoinSet::new();
        for (i, control) in self.controls.iter().enumerate() {
            let (admin_url, url) = (control.admin_url(), control.url());
            asks.spawn(async move {
                leadership_at(admin_url, url).await.filter(|l| l.role == "leader").map(|_| i)
            });
        }
        while let Some(answer) = asks.join_next().await {
            if let Ok(Some(i)) = answer {
                return Some(i);
            }
        }
        None
    }

    /// Waits (bounded) for a leader other than `not` (any, with `None`).
    ///
    /// # Errors
    /// When none is elected in time.
    pub async fn wait_leader(&self, not: Option<usize>) -> anyhow::Result<usize> {
        Ok(poll(ELECTED, "a leader to be elected", async || self.leader().await.filter(|l| Some(*l) != not))
            .await?)
    }

    /// Waits (bounded) until the leader reports its ledger warm; gives its index.
    ///
    /// # Errors
    /// When no leader is warm in time.
    pub async fn wait_warm(&self, within: Duration) -> anyhow::Result<usize> {
        Ok(poll(within, "the leader's ledger to be warm", async || {
            let leader = self.leader().await?;
            self.leadership(leader).await.filter(|l| l.warm).map(|_| leader)
        })
        .await?)
    }

    /// SIGKILLs replica `i`.
    pub fn kill(&mut self, i: usize) {
        self.controls[i].node.kill();
    }

    /// Starts replica `i` again (killing it first if it runs) on its addresses.
    ///
    /// # Errors
    /// When it does not start.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.controls[i].node.process().expect("replicas run as processes").restart()
    }

    /// SIGSTOPs replica `i`.
    ///
    /// # Errors
    /// When it is not running.
    pub fn pause(&mut self, i: usize) -> anyhow::Result<()> {
        self.controls[i].node.process().expect("replicas run as processes").pause()
    }

    /// SIGCONTs replica `i`.
    ///
    /// # Errors
    /// When it is not running.
    pub fn resume(&mut self, i: usize) -> anyhow::Result<()> {
        self.controls[i].node.process().expect("replicas run as processes").resume()
    }
}

/// The leadership the control at `url` reports of itself, asked on its Admin socket `admin_url`.
async fn leadership_at(admin_url: String, url: String) -> Option<pb::Leadership> {
    let channel = tonic::transport::Endpoint::from_shared(admin_url)
        .ok()?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .ok()?;
    let mut admin = pb::admin_client::AdminClient::new(channel);
    let config = admin.get_config(pb::GetConfigRequest::default()).await.ok()?.into_inner();
    config.leadership.filter(|l| l.url == url)
}

//! The chaos bench's outages, each at its moment of the schedule, one after the other: a proxy
//! SIGKILLed and restarted on its port, control SIGKILLed and restarted on its ports (the proxies
//! re-declare their legs to it), and etcd stopped and started again (control's leader lease
//! lapses; the proxies route from their last target lists meanwhile). Each is watched until the
//! deployment is whole again, with deadlines.

use std::time::{Duration, Instant};

use infera_testkit::http::{get_ok, metric_sum};
use infera_testkit::poll;

use super::deploy::{Deployment, MODEL};
use super::load::{Progress, Rotation};

/// How long a part may take to be back.
const BACK: Duration = Duration::from_secs(60);
/// The proxy that is killed.
pub(crate) const KILLED_PROXY: usize = 1;

/// When the outages happen and how long they last.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) proxy_kill: usize,
    pub(crate) control_kill: usize,
    pub(crate) etcd_stop: usize,
    /// How long the killed proxy stays down before it is restarted.
    pub(crate) proxy_down: Duration,
    /// How long etcd stays stopped.
    pub(crate) etcd_down: Duration,
}

/// What the outages took, and what was read from the parts just before they were killed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outages {
    /// The requests issued when each outage began and when it was over: proxy, control, etcd.
    pub(crate) spans: Vec<(usize, usize, &'static str)>,
    /// The killed proxy's `/metrics` and peak RSS (kB) just before its kill.
    pub(crate) proxy_metrics: String,
    pub(crate) proxy_hwm_kb: Option<u64>,
    /// From the kill until it was ready and back in rotation.
    pub(crate) proxy_back: Duration,
    /// Control's `/metrics` just before its kill.
    pub(crate) control_metrics: String,
    /// From control's kill until it led again, and until its ledger was warm.
    pub(crate) control_leading: Duration,
    pub(crate) control_warm: Duration,
    /// From etcd's stop until control no longer led (if it stopped leading while etcd was away).
    pub(crate) etcd_lapsed: Option<Duration>,
    /// From etcd's start until control led again.
    pub(crate) etcd_leading: Duration,
    /// Picks the proxies routed on their own from etcd's stop until control led again.
    pub(crate) etcd_fallback_picks: f64,
}

/// The peak resident set (`VmHWM`, kB) of process `pid`.
pub(crate) fn vm_hwm_kb(pid: Option<u32>) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn text(url: &str) -> String {
    tokio::time::timeout(Duration::from_secs(2), get_ok(url))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

async fn fallback_picks(d: &Deployment) -> f64 {
    let mut sum = 0.0;
    for p in &d.cluster.proxies {
        sum +=
            metric_sum(&text(&format!("{}/metrics", p.url)).await, "infera_proxy_fallback_picks_total", "");
    }
    sum
}

async fn leads(d: &Deployment) -> bool {
    let url = d.cluster.control.url();
    d.leadership().await.is_some_and(|l| l.role == "leader" && l.url == url)
}

/// Runs the three outages at their moments.
pub(crate) async fn run(
    d: &mut Deployment,
    plan: &Plan,
    progress: &Progress,
    rotation: &Rotation,
) -> anyhow::Result<Outages> {
    let mut out = Outages::default();

    // A proxy crash: SIGKILL, down for a while (clients find out by refused connections), then
    // restarted on its port and put back in rotation once ready.
    progress.reached(plan.proxy_kill).await;
    let proxy = &mut d.cluster.proxies[KILLED_PROXY];
    out.proxy_metrics = text(&format!("{}/metrics", proxy.url)).await;
    out.proxy_hwm_kb = vm_hwm_kb(proxy.node.process().and_then(|p| p.pid()));
    let t0 = Instant::now();
    // Recorded first: a client whose connection breaks while the kill is reaped counts it lost.
    rotation.killed(KILLED_PROXY);
    proxy.node.kill();
    tokio::time::sleep(plan.proxy_down).await;
    rotation.out(KILLED_PROXY);
    let process = proxy.node.process().expect("the proxies run as processes");
    tokio::task::block_in_place(|| process.restart())?;
    proxy.wait_ready(MODEL).await?;
    rotation.back(KILLED_PROXY);
    out.proxy_back = t0.elapsed();
    out.spans.push((plan.proxy_kill, progress.issued(), "the proxy kill"));

    // A control crash: SIGKILL and at once a new process on the same ports; it leads once its
    // predecessor's leader lease has expired in etcd, and is warm once the proxies re-declared.
    progress.reached(plan.control_kill).await;
    out.control_metrics = text(&format!("http://{}/metrics", d.cluster.control.metrics_addr)).await;
    let t0 = Instant::now();
    d.cluster.control.node.kill();
    let process = d.cluster.control.node.process().expect("control runs as a process");
    tokio::task::block_in_place(|| process.restart())?;
    poll(BACK, "the restarted control to lead", async || leads(d).await).await?;
    out.control_leading = t0.elapsed();
    poll(BACK, "the restarted control to be warm", async || d.leadership().await.is_some_and(|l| l.warm))
        .await?;
    out.control_warm = t0.elapsed();
    out.spans.push((plan.control_kill, progress.issued(), "the control kill"));

    // etcd away: control keeps its worker view but its leader lease cannot be renewed.
    progress.reached(plan.etcd_stop).await;
    let picks_before = fallback_picks(d).await;
    let t0 = Instant::now();
    tokio::task::block_in_place(|| d.cluster.etcd().stop());
    while t0.elapsed() < plan.etcd_down {
        if out.etcd_lapsed.is_none() && !leads(d).await {
            out.etcd_lapsed = Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t1 = Instant::now();
    tokio::task::block_in_place(|| d.cluster.etcd().resume());
    poll(BACK, "control to lead again after etcd is back", async || leads(d).await).await?;
    out.etcd_leading = t1.elapsed();
    out.etcd_fallback_picks = fallback_picks(d).await - picks_before;
    out.spans.push((plan.etcd_stop, progress.issued(), "the etcd outage"));
    Ok(out)
}

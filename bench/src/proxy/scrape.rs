//! What the bench reads from `/metrics`: the proxy's in-flight count (the memory round waits for
//! it), and the decode pick histograms of the proxy (its round trip) and of control (its own
//! time): where a proxied request's time goes.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use infera_testkit::http::metric_sum;

use super::HttpClient;

async fn metrics(client: &HttpClient, addr: &str) -> anyhow::Result<String> {
    let req = http::Request::get(format!("http://{addr}/metrics")).body(Full::new(Bytes::new()))?;
    let body = client.request(req).await?.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// `infera_proxy_inflight_requests`.
pub(super) async fn inflight(client: &HttpClient, addr: &str) -> anyhow::Result<f64> {
    Ok(metric_sum(&metrics(client, addr).await?, "infera_proxy_inflight_requests", ""))
}

/// Decode picks answered so far and the seconds they took, summed, as one side saw them.
#[derive(Clone, Copy, Debug, Default)]
struct PickTime {
    count: f64,
    seconds: f64,
}

/// Whose view of the decode picks: the proxy's round trip, or control's own time.
#[derive(Clone, Copy, Debug)]
enum PickView {
    /// `infera_proxy_pick_seconds`: from sending the pick to control's answer.
    Proxy,
    /// `infera_router_pick_duration_seconds`: picking and booking, inside control.
    Control,
}

impl PickView {
    fn histogram(self) -> &'static str {
        match self {
            Self::Proxy => "infera_proxy_pick_seconds",
            Self::Control => "infera_router_pick_duration_seconds",
        }
    }
}

impl PickTime {
    /// The decode picks' count and summed time now, as `view` at `addr` (its `/metrics`) saw them.
    async fn read(client: &HttpClient, addr: &str, view: PickView) -> anyhow::Result<Self> {
        let text = metrics(client, addr).await?;
        let decode = "kind=\"decode\"";
        let name = view.histogram();
        Ok(Self {
            count: metric_sum(&text, &format!("{name}_count"), decode),
            seconds: metric_sum(&text, &format!("{name}_sum"), decode),
        })
    }

    /// The mean pick time, in ms, of the picks answered since `earlier`.
    fn mean_ms_since(self, earlier: Self) -> f64 {
        let n = self.count - earlier.count;
        if n > 0.0 { (self.seconds - earlier.seconds) / n * 1e3 } else { f64::NAN }
    }
}

/// The decode picks so far, as the proxy and as control saw them.
#[derive(Clone, Copy, Debug)]
struct Picks {
    proxy: PickTime,
    control: PickTime,
}

impl Picks {
    /// The mean round trip and the mean time inside control, in ms, of the picks since `earlier`.
    fn means_ms_since(self, earlier: Self) -> PickMeans {
        PickMeans {
            round_trip: self.proxy.mean_ms_since(earlier.proxy),
            inside_control: self.control.mean_ms_since(earlier.control),
        }
    }
}

/// Where the decode pick histograms are read: the proxy's and control's `/metrics`.
#[derive(Clone, Copy, Debug)]
pub(super) struct PickScrape<'a> {
    pub(super) client: &'a HttpClient,
    pub(super) proxy: &'a str,
    pub(super) control: &'a str,
}

impl PickScrape<'_> {
    async fn read(&self) -> anyhow::Result<Picks> {
        Ok(Picks {
            proxy: PickTime::read(self.client, self.proxy, PickView::Proxy).await?,
            control: PickTime::read(self.client, self.control, PickView::Control).await?,
        })
    }

    /// `work`'s result and, when `watch`, the decode picks' mean times while it ran.
    pub(super) async fn during<T>(
        &self,
        watch: bool,
        work: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<(T, Option<PickMeans>)> {
        if !watch {
            return Ok((work.await?, None));
        }
        let before = self.read().await?;
        let out = work.await?;
        Ok((out, Some(self.read().await?.means_ms_since(before))))
    }
}

/// Mean decode pick times over a stretch, in ms.
#[derive(Clone, Copy, Debug)]
pub(super) struct PickMeans {
    pub(super) round_trip: f64,
    pub(super) inside_control: f64,
}

impl std::fmt::Display for PickMeans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ms ({:.3} inside control)", self.round_trip, self.inside_control)
    }
}

//! What the bench reads from the proxy's `/metrics`: its in-flight count (the memory round waits
//! for it) and its pick histogram (where a proxied request's time goes at the peak rate).

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

/// Decode picks answered so far and the seconds they took, summed.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PickTime {
    pub(super) count: f64,
    pub(super) seconds: f64,
}

impl PickTime {
    /// The decode picks' count and summed time now.
    pub(super) async fn read(client: &HttpClient, addr: &str) -> anyhow::Result<Self> {
        let text = metrics(client, addr).await?;
        let decode = "kind=\"decode\"";
        Ok(Self {
            count: metric_sum(&text, "infera_proxy_pick_seconds_count", decode),
            seconds: metric_sum(&text, "infera_proxy_pick_seconds_sum", decode),
        })
    }

    /// The mean pick time, in ms, of the picks answered since `earlier`.
    pub(super) fn mean_ms_since(self, earlier: Self) -> f64 {
        let n = self.count - earlier.count;
        if n > 0.0 { (self.seconds - earlier.seconds) / n * 1e3 } else { f64::NAN }
    }
}

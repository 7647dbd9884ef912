//! A small HTTP/1.1 client for probes: one request, the whole body as text.

use bytes::Bytes;
pub use http::Method;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// `method url` with `body`: the status and the body as text.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn request(
    method: Method,
    url: &str,
    body: Option<&Value>,
) -> anyhow::Result<(StatusCode, String)> {
    request_with(method, url, body, &[]).await
}

/// [`request`] with these headers too.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn request_with(
    method: Method,
    url: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> anyhow::Result<(StatusCode, String)> {
    let mut req = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let bytes = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Bytes::from(serde_json::to_vec(b)?)
        }
        None => Bytes::new(),
    };
    let resp = client().request(req.body(Full::new(bytes))?).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// POST `body` as sent (JSON or not) to `url` with `headers`: the status and the body as text.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn post_bytes(
    url: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> anyhow::Result<(StatusCode, String)> {
    let mut req = Request::builder().method(Method::POST).uri(url).header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = client().request(req.body(Full::new(Bytes::from(body)))?).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// GET `url`: the status and body.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn get(url: &str) -> anyhow::Result<(StatusCode, String)> {
    request(Method::GET, url, None).await
}

/// GET `url`: the body of a 2xx answer.
///
/// # Errors
/// When the connection fails or the status is not 2xx.
pub async fn get_ok(url: &str) -> anyhow::Result<String> {
    let (status, body) = get(url).await?;
    anyhow::ensure!(status.is_success(), "GET {url}: {status} {body}");
    Ok(body)
}

/// GET `url` as JSON (2xx only).
///
/// # Errors
/// When the connection fails, the status is not 2xx or the body is not JSON.
pub async fn get_json(url: &str) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&get_ok(url).await?)?)
}

/// POST `body` as JSON to `url`: the status and body.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn post_json(url: &str, body: &Value) -> anyhow::Result<(StatusCode, String)> {
    request(Method::POST, url, Some(body)).await
}

/// The sum of the samples of exactly the series `name` (a gauge: not its `_total`, `_bucket` or
/// other suffixed families) whose label text contains `labels`.
pub fn metric_exact(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(labels))
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of a Prometheus/OpenMetrics family's samples whose label text contains `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(labels))
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' ', '_'])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_summed_by_label() {
        let text = "# HELP infera_router_picks_total Picks\n\
                    infera_router_picks_total{kind=\"decode\",mode=\"on\",outcome=\"ok\"} 7\n\
                    infera_router_picks_total{kind=\"prefill\",mode=\"on\",outcome=\"ok\"} 7\n\
                    infera_router_picks_total{kind=\"decode\",mode=\"on\",outcome=\"no_eligible_target\"} 1\n\
                    infera_router_picks_totals 100\n";
        assert_eq!(metric_sum(text, "infera_router_picks_total", "kind=\"decode\""), 8.0);
        assert_eq!(metric_sum(text, "infera_router_picks", "prefill"), 7.0);
        assert_eq!(metric_sum("", "infera_router_picks_total", ""), 0.0);
    }
}

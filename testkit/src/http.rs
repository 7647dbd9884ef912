//! A small HTTP/1.1 client for probes: one request, the whole body as text ([`request`],
//! [`get`], [`post_json`], …), or the answer unread ([`send`]); one request on a connection of
//! its own, which a test can break off ([`send_on_connection`]).

use std::net::SocketAddr;

use bytes::Bytes;
pub use http::Method;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::task::JoinHandle;

/// What the kit's requests carry.
pub type Body = Full<Bytes>;

/// A client of plain `http://` URLs, pooling its connections, sending bodies of type `B`
/// ([`Body`] unless a test streams its own): for a test that sends many requests itself (a
/// load, a fuzzer) and reads its errors (`is_connect`).
pub fn client<B>() -> Client<HttpConnector, B>
where
    B: hyper::body::Body + Send,
    B::Data: Send,
{
    Client::builder(TokioExecutor::new()).build_http()
}

/// `method url` with `body` and `headers`: the answer, its body unread.
///
/// # Errors
/// When the connection fails or breaks before the answer's head.
pub async fn send(
    method: Method,
    url: &str,
    body: Bytes,
    headers: &[(&str, &str)],
) -> anyhow::Result<Response<Incoming>> {
    let mut req = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    Ok(client().request(req.body(Full::new(body))?).await?)
}

/// The status and the whole body of `resp`, as text.
async fn read(resp: Response<Incoming>) -> anyhow::Result<(StatusCode, String)> {
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// `POST path` with `body` as JSON and `headers`, for [`send_on_connection`] (`host: localhost`).
///
/// # Panics
/// When a header is not a valid header.
pub fn json_request(path: &str, body: &Value, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::post(path).header("host", "localhost").header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// Sends `req` (its URI a path) to `addr` on a connection of its own: the answer, its body
/// unread, and the connection's task (aborting it hangs up).
///
/// # Errors
/// When the connection breaks before the answer's head.
///
/// # Panics
/// When `addr` refuses the connection.
pub async fn send_on_connection(
    addr: SocketAddr,
    req: Request<Body>,
) -> Result<(Response<Incoming>, JoinHandle<()>), hyper::Error> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender.send_request(req).await?;
    Ok((response, conn))
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
    read(client().request(req.body(Full::new(bytes))?).await?).await
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
    request_bytes(Method::POST, url, body, headers).await
}

/// `method url` with `body` as sent (JSON or not, as `application/json`) and `headers`: the
/// status and the body as text.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn request_bytes(
    method: Method,
    url: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> anyhow::Result<(StatusCode, String)> {
    let mut req = Request::builder().method(method).uri(url).header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    read(client().request(req.body(Full::new(Bytes::from(body)))?).await?).await
}

/// GET `url`: the status and body.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn get(url: &str) -> anyhow::Result<(StatusCode, String)> {
    request(Method::GET, url, None).await
}

/// GET `url` with `key`, if any, as its bearer token (`authorization: Bearer KEY`): the status
/// and body.
///
/// # Errors
/// When the connection fails or breaks.
pub async fn get_as(url: &str, key: Option<&str>) -> anyhow::Result<(StatusCode, String)> {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    request_with(Method::GET, url, None, &headers).await
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

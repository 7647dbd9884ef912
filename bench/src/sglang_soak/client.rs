//! Sends one drawn request — through a proxy, or straight to the workers as the simplest PD
//! client does (both legs at once with the same bootstrap host, port and room, the decode's
//! answer kept) — and says how it ended, with its time to first byte and to the end.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use rand::Rng;
use serde_json::Value;

use super::requests::Drawn;

/// The bench's HTTP client.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Where a request goes.
#[derive(Clone, Debug)]
pub(crate) enum Route {
    /// A proxy's base URL.
    Proxy(String),
    /// An aggregated worker's base URL.
    Worker(String),
    /// A PD pair: the prefill's URL, host and bootstrap port, and the decode's URL.
    Pair { prefill: String, host: String, bootstrap_port: u16, decode: String },
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum End {
    /// 2xx and a complete answer (a stream with `[DONE]` or SGLang's last event, no error).
    Ok {
        /// Send → the first byte of the answer's body.
        first_byte: Duration,
        /// Send → the end of the answer.
        total: Duration,
    },
    /// An error status or an error event: the status (0 for an event) and the text.
    Error(u16, String),
    /// The client hung up as drawn.
    Cancelled,
    /// The connection broke or the answer was cut.
    Broken(String),
    /// No end within the timeout.
    Hung,
}

/// The client every request goes out on.
pub(crate) fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build_http()
}

/// Sends `d` on `route`, hanging up when it is drawn to, giving up after `timeout`.
pub(crate) async fn send(http: &HttpClient, route: &Route, d: &Drawn, timeout: Duration) -> End {
    let run = async {
        match route {
            Route::Proxy(url) => one(http, &format!("{url}{}", d.api.path()), d.body('p'), &d.id()).await,
            Route::Worker(url) => one(http, &format!("{url}{}", d.api.path()), direct_body(d), &d.id()).await,
            Route::Pair { prefill, host, bootstrap_port, decode } => {
                let mut body = direct_body(d);
                body["bootstrap_host"] = host.as_str().into();
                body["bootstrap_port"] = (*bootstrap_port).into();
                body["bootstrap_room"] = (rand::rng().random::<u64>() & (i64::MAX as u64)).into();
                let (path, id) = (d.api.path(), d.id());
                let (to_prefill, to_decode) = (format!("{prefill}{path}"), format!("{decode}{path}"));
                let (_, end) =
                    tokio::join!(one(http, &to_prefill, body.clone(), &id), one(http, &to_decode, body, &id));
                end
            }
        }
    };
    match d.cancel_after {
        Some(after) => match tokio::time::timeout(after, run).await {
            Ok(end) => end,
            Err(_) => End::Cancelled,
        },
        None => tokio::time::timeout(timeout, run).await.unwrap_or(End::Hung),
    }
}

/// What goes to a worker directly: SGLang's `/generate` takes no `model`.
fn direct_body(d: &Drawn) -> Value {
    let mut body = d.body('d');
    if d.api == super::requests::Api::Generate
        && let Some(map) = body.as_object_mut()
    {
        map.remove("model");
    }
    body
}

async fn one(http: &HttpClient, url: &str, body: Value, id: &str) -> End {
    let start = Instant::now();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-request-id", id)
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a request");
    let resp = match http.request(req).await {
        Ok(r) => r,
        Err(e) => return End::Broken(e.to_string()),
    };
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut text = Vec::new();
    let mut first_byte = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Some(data) = f.data_ref() {
                    first_byte.get_or_insert_with(|| start.elapsed());
                    text.extend_from_slice(data);
                }
            }
            Err(e) => return End::Broken(e.to_string()),
        }
    }
    let total = start.elapsed();
    let text = String::from_utf8_lossy(&text).into_owned();
    if !(200..300).contains(&status) {
        return End::Error(status, text);
    }
    if let Some(err) = stream_error(&text) {
        return End::Error(0, err);
    }
    End::Ok { first_byte: first_byte.unwrap_or(total), total }
}

/// An SSE stream's error event, if it has one.
fn stream_error(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v.get("error").is_some_and(|e| !e.is_null()))
        .map(|v| v["error"].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_events_are_found_in_a_stream() {
        assert_eq!(stream_error("data: {\"a\":1}\n\ndata: [DONE]\n\n"), None);
        let cut = "data: {\"a\":1}\n\ndata: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n";
        assert_eq!(stream_error(cut).as_deref(), Some("{\"message\":\"x\"}"));
        assert_eq!(stream_error("data: {\"error\":null}\n\n"), None);
    }
}

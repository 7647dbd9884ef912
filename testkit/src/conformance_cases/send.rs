//! Sending a [`Case`] to a worker and keeping what the comparison needs of the answer.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use super::Case;
use crate::http::client;
use crate::shape::{collapse_runs, parse_sse};

/// A worker's answer to one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// `content-type` without parameters (`application/json`), if any.
    pub media_type: Option<String>,
    /// The body as received.
    pub body: String,
}

impl Answer {
    /// The answer as one JSON value to compare by shape: `{"http <status>": {"<media type>":
    /// body}}` — so another status or media type is a missing and an extra member — where the
    /// body is its JSON, a stream's events with runs of one shape collapsed
    /// ([`collapse_runs`]), or else its text. No media type is `"none"`.
    pub fn shape(&self) -> Value {
        let media = self.media_type.clone().unwrap_or_else(|| "none".to_owned());
        let body = if media == "text/event-stream" {
            Value::Array(collapse_runs(&parse_sse(&self.body)))
        } else if let Some(metrics) = prometheus(&self.body) {
            metrics
        } else {
            serde_json::from_str(&self.body).unwrap_or_else(|_| Value::String(self.body.clone()))
        };
        json!({ format!("http {}", self.status): { media: body } })
    }
}

/// A Prometheus text exposition as `{"metric{labels}": value}` (values as JSON numbers), so
/// its metric names compare like members; `None` when `text` is not one.
fn prometheus(text: &str) -> Option<Value> {
    let mut samples = serde_json::Map::new();
    for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ')?;
        let number: Value = serde_json::from_str(value).ok().filter(Value::is_number)?;
        samples.insert(name.to_owned(), number);
    }
    (!samples.is_empty()).then_some(Value::Object(samples))
}

/// Sends `case` to the worker at `base` (`http://host:port`), with `body` instead of the case's
/// own when given (a PD leg's).
///
/// # Errors
/// When the connection fails or breaks.
pub async fn send(base: &str, case: &Case, body: Option<&Value>) -> anyhow::Result<Answer> {
    let text = match body {
        Some(b) => Some(serde_json::to_string(b)?),
        None => case.body_text(),
    };
    let mut req = Request::builder()
        .method(Method::from_bytes(case.method.as_bytes())?)
        .uri(format!("{base}{}", case.path));
    if text.is_some() {
        req = req.header("content-type", "application/json");
    }
    let bytes = text.map(Bytes::from).unwrap_or_default();
    let resp = client().request(req.body(Full::new(bytes))?).await?;
    let status = resp.status().as_u16();
    let media_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Answer { status, media_type, body: String::from_utf8_lossy(&body).into_owned() })
}

/// Sends a PD `case` to both legs at once, as a router does: the same body with
/// `bootstrap_host`, the prefill's `bootstrap_port` and `room`. Returns (prefill, decode).
///
/// # Errors
/// When the case has no JSON body, or a connection fails.
pub async fn send_pd(
    prefill: &str,
    decode: &str,
    bootstrap_host: &str,
    bootstrap_port: u16,
    room: u64,
    case: &Case,
) -> anyhow::Result<(Answer, Answer)> {
    let body = case
        .pd_body(bootstrap_host, bootstrap_port, room)
        .ok_or_else(|| anyhow::anyhow!("{}: no JSON body", case.name))?;
    let (p, d) = tokio::join!(send(prefill, case, Some(&body)), send(decode, case, Some(&body)));
    Ok((p?, d?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_shape_keys_status_and_media_type() {
        let a =
            Answer { status: 200, media_type: Some("application/json".into()), body: r#"{"a":1}"#.into() };
        assert_eq!(a.shape(), json!({"http 200": {"application/json": {"a": 1}}}));
        let s = Answer {
            status: 200,
            media_type: Some("text/event-stream".into()),
            body: "data: {\"n\":1}\n\ndata: {\"n\":2}\n\ndata: [DONE]\n\n".into(),
        };
        assert_eq!(
            s.shape(),
            json!({"http 200": {"text/event-stream": [{"data": {"n": 1}}, {"data": "[DONE]"}]}})
        );
        let p = Answer {
            status: 200,
            media_type: Some("text/plain".into()),
            body: "# TYPE sglang_x gauge\nsglang_x{dp_rank=\"0\"} 0.5\nsglang_n{dp_rank=\"0\"} 3\n".into(),
        };
        assert_eq!(
            p.shape(),
            json!({"http 200": {"text/plain": {"sglang_x{dp_rank=\"0\"}": 0.5, "sglang_n{dp_rank=\"0\"}": 3}}})
        );
        let e = Answer { status: 200, media_type: None, body: String::new() };
        assert_eq!(e.shape(), json!({"http 200": {"none": ""}}));
    }
}

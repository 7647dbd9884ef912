//! Server-sent events as tests read them: a whole body parsed into its events ([`parse`],
//! [`data`]), or a stream read event by event as it arrives, on a connection of its own that a
//! test can hang up mid-stream ([`Events`]). The comparator's view of a stream
//! ([`crate::shape::parse_sse`]) is built on [`parse`].

use std::net::SocketAddr;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::http::{Body, json_request, send_on_connection};

/// One event of a body: its `event:` name, if named, and its `data:` lines joined with `\n`
/// (one space after the colon dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The `event:` name.
    pub name: Option<String>,
    /// The data text (`[DONE]` as it came).
    pub data: String,
}

/// The events of an SSE body, in order (`\r\n` read as `\n`); a block with neither an `event:`
/// nor a `data:` line (a comment, a blank) is none.
pub fn parse(body: &str) -> Vec<Event> {
    let body = body.replace("\r\n", "\n");
    let mut events = Vec::new();
    for block in body.split("\n\n") {
        let mut name = None;
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = Some(n.trim().to_owned());
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if data.is_empty() && name.is_none() {
            continue;
        }
        events.push(Event { name, data: data.join("\n") });
    }
    events
}

/// The data of each event of an SSE body, in order (`[DONE]` included).
pub fn data(body: &str) -> Vec<String> {
    parse(body).into_iter().map(|e| e.data).collect()
}

/// The JSON of an event's data (the text of one event, as [`Events::next`] gives it).
pub fn data_of(event: &str) -> Option<Value> {
    parse(event).into_iter().next().and_then(|e| serde_json::from_str(&e.data).ok())
}

/// An SSE response being read event by event.
#[derive(Debug)]
pub struct Events {
    /// The response's status.
    pub status: StatusCode,
    /// Its `content-type` (empty when none).
    pub content_type: String,
    body: Incoming,
    buf: String,
    conn: JoinHandle<()>,
}

/// What reading the next event gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// One event's text (`data: …` lines, `event:` lines kept).
    Event(String),
    /// The body ended cleanly.
    End,
    /// The body broke off.
    Broken,
}

impl Events {
    /// POSTs `body` as JSON to `path` on `addr` and reads the answer's head.
    ///
    /// # Panics
    /// When the connection fails or breaks before the head.
    pub async fn open(addr: SocketAddr, path: &str, body: Value) -> Self {
        Self::open_with(addr, json_request(path, &body, &[])).await
    }

    /// Sends `req` to `addr` on a connection of its own and reads the answer's head.
    ///
    /// # Panics
    /// When the connection fails or breaks before the head.
    pub async fn open_with(addr: SocketAddr, req: Request<Body>) -> Self {
        let (response, conn) = send_on_connection(addr, req).await.expect("a response head");
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        Self { status, content_type, body: response.into_body(), buf: String::new(), conn }
    }

    /// The next event, as it comes.
    ///
    /// # Panics
    /// When the stream is not UTF-8.
    pub async fn next(&mut self) -> Next {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let event = self.buf[..at].to_owned();
                self.buf.drain(..at + 2);
                return Next::Event(event);
            }
            match self.body.frame().await {
                None => return Next::End,
                Some(Err(_)) => return Next::Broken,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.push_str(std::str::from_utf8(&data).unwrap());
                    }
                }
            }
        }
    }

    /// The next event's data as JSON.
    ///
    /// # Panics
    /// On anything else.
    pub async fn data(&mut self) -> Value {
        match self.next().await {
            Next::Event(e) => data_of(&e).unwrap_or_else(|| panic!("not JSON data: {e:?}")),
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// Every remaining event until the end; `(events, how it ended)`.
    pub async fn rest(&mut self) -> (Vec<String>, Next) {
        let mut events = Vec::new();
        loop {
            match self.next().await {
                Next::Event(e) => events.push(e),
                end => return (events, end),
            }
        }
    }

    /// Hangs up (closes the TCP connection).
    pub fn hang_up(self) {
        self.conn.abort();
        drop(self.body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_with_names_multi_line_data_and_done() {
        let body = "event: error\ndata: {\"a\":1}\n\ndata:x\ndata: y\n\n: a comment\n\ndata: [DONE]\n\n";
        let named = Event { name: Some("error".into()), data: "{\"a\":1}".into() };
        assert_eq!(parse(body)[0], named);
        assert_eq!(data(body), ["{\"a\":1}", "x\ny", "[DONE]"]);
        assert_eq!(data("data: a\r\n\r\ndata: b"), ["a", "b"]);
        assert_eq!(data_of("event: e\ndata: {\"n\":2}"), Some(serde_json::json!({"n": 2})));
        assert_eq!(data_of("data: [DONE]"), None);
    }
}

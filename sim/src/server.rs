//! Serving the API and bootstrap listeners (on infera's shared accept loop,
//! `infera_runtime::serve`), the response body type and the few response builders every route
//! uses.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use infera_runtime::serve::tls::ServerTls;
use infera_runtime::serve::{Drain, Listening, Plain, serve_http};
use tokio::net::TcpListener;

/// Every response body: whole, or a stream that may fail (failing closes the connection).
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// How long open connections get to finish after shutdown is asked for.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `handler` on `listener` until `stop` resolves, then drains open connections (at most
/// [`DRAIN`]), on the accept loop every infera server shares; over TLS with `tls` (SGLang's
/// `--ssl-certfile`).
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<std::sync::Arc<ServerTls>>,
    handler: H,
    stop: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    // SGLang serves with uvicorn; the emulator holds its connections to the same kind of limits.
    let listening = Listening::new(infera_runtime::serve::ConnLimits::DEFAULT);
    match tls {
        Some(tls) => serve_http(listener, tls, handler, stop, Drain::For(DRAIN), listening).await,
        None => serve_http(listener, Plain, handler, stop, Drain::For(DRAIN), listening).await,
    }
}

/// A JSON response.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    with_type(status, "application/json", Bytes::from(value.to_string()))
}

/// A plain-text response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    with_type(status, "text/plain; charset=utf-8", body.into())
}

/// A response of `content_type`.
pub fn typed(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    with_type(status, content_type, body.into())
}

/// A response with a body and no `content-type` (Starlette's plain `Response`).
pub fn untyped(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = status;
    r
}

/// An empty response.
pub fn empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::new()).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = status;
    r
}

/// A `text/event-stream` response over `events`.
pub fn sse<S>(events: S) -> Response<Body>
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    use futures_util::StreamExt;
    let body = StreamBody::new(events.map(|chunk| chunk.map(Frame::data)));
    let mut r = Response::new(BodyExt::boxed_unsync(body));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    r.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache"));
    r
}

/// A body that fails after sending nothing: the connection closes mid-response.
pub fn broken(status: StatusCode) -> Response<Body> {
    let stream = futures_util::stream::once(async {
        Err::<Frame<Bytes>, _>(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "die fault"))
    });
    let mut r = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn with_type(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Reads a request body whole (at most `limit` bytes).
pub async fn read_body(req: Request<Incoming>, limit: usize) -> Result<Bytes, BodyError> {
    let body = http_body_util::Limited::new(req.into_body(), limit);
    body.collect().await.map(|c| c.to_bytes()).map_err(BodyError)
}

/// A request body that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the request body: {0}")]
pub struct BodyError(#[source] Box<dyn std::error::Error + Send + Sync>);

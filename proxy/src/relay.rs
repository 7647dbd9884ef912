//! The decode answer, relayed frame by frame as it arrives, with the request's end observed
//! once and its [`RequestLegs`] ended with it: EOF releases `EOF`; an upstream error, a failed
//! prefill or a stream silent for `--stream-idle-timeout-ms` releases `FAILED` (a stream gets an
//! SSE error event and `[DONE]`); the client going away — the body dropped before its end —
//! releases `CANCELLED` and aborts both upstream legs.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use infera_proto::types::{Api, LegFailure, ReleaseReason};

use crate::access::{Access, Seen};
use crate::admission::Admitted;
use crate::body::BodyError;
use crate::error::{Leg, ProxyError};
use crate::metrics::InflightGuard;
use crate::request_legs::RequestLegs;
use crate::upstream::Upstreams;
use crate::usage::UsageTap;

/// The end of a request: ends its legs exactly once (releasing both, and when the request did
/// not end normally cancelling the prefill and aborting upstream work), and writes its record.
#[derive(Debug)]
pub struct EndGuard {
    up: Upstreams,
    legs: RequestLegs,
    /// The request's record, written at its end (`None` once written, or never kept).
    access: Option<Access>,
    /// What the relay saw of the answer.
    seen: Seen,
}

impl EndGuard {
    /// Guards the legs of a dispatched request.
    pub fn new(up: Upstreams, legs: RequestLegs) -> Self {
        let seen = Seen { first_byte: None, usage: UsageTap::new(false) };
        Self { up, legs, access: None, seen }
    }

    /// Writes `access` when the request ends (the access line, tokens, duration).
    pub fn with_access(mut self, access: Access, stream: bool) -> Self {
        self.access = Some(access);
        self.seen.usage = UsageTap::new(stream);
        self
    }

    /// Ends the request with `reason` (once; later calls do nothing).
    pub fn end(&mut self, reason: ReleaseReason) {
        if self.legs.end(reason) {
            self.write_access(reason);
        }
    }

    /// Ends the request as failed with `e` (once; later calls do nothing).
    pub fn fail(&mut self, e: &ProxyError) {
        if self.legs.fail(e) {
            self.write_access(ReleaseReason::Failed);
        }
    }

    /// Writes the request's record, ended with `reason`.
    fn write_access(&mut self, reason: ReleaseReason) {
        if let Some(access) = self.access.take() {
            access.end(Some(&self.seen), reason.as_str(), &self.up.metrics);
        }
    }
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        // Dropped before an end was seen: the client went away.
        self.end(ReleaseReason::Cancelled);
    }
}

/// A generation request from the moment the proxy took it: when (the start of its TTFT) and its
/// place in `infera_proxy_inflight_requests`.
#[derive(Debug)]
pub struct Started {
    /// When the request arrived.
    pub at: Instant,
    /// Counts it in flight until the answer ends.
    pub inflight: InflightGuard,
    /// Its place in flight (`--max-inflight`), given up when the answer ends.
    pub admitted: Option<Admitted>,
}

/// A dispatched request whose decode answer is relayed: what observing and ending it needs.
#[derive(Debug)]
pub struct Relayed {
    /// Workers, control, metrics.
    pub up: Upstreams,
    /// Its legs, ended when the answer ends.
    pub legs: RequestLegs,
    /// Which API (the TTFT label).
    pub api: Api,
    /// The request's record, written at its end.
    pub access: Access,
    /// Whether the answer is an SSE stream: errors are then reported as an SSE event.
    pub stream: bool,
    /// When it started.
    pub started: Started,
}

/// The relayed body.
pub struct Relay {
    inner: Incoming,
    guard: EndGuard,
    stream: bool,
    done: bool,
    api: Api,
    /// The model and worker labels of the answer's metrics.
    model: Arc<str>,
    worker: Arc<str>,
    started: Instant,
    last_data: Option<Instant>,
    /// Bytes still to come of a body with a `content-length`.
    remaining: Option<u64>,
    /// The first frame, read by the first-byte gate before the relay began.
    first: Option<Frame<Bytes>>,
    /// The longest silence a stream may keep, and the timer of the current one.
    idle: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    /// The request's count in flight and its place (`--max-inflight`), until the answer ends.
    _inflight: (InflightGuard, Option<Admitted>),
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("stream", &self.stream).finish_non_exhaustive()
    }
}

impl Relay {
    /// Relays `inner`, the decode answer of `request`.
    pub fn new(inner: Incoming, request: Relayed) -> Self {
        let Relayed { up, legs, api, access, stream, started } = request;
        let worker = Arc::from(legs.decode().map_or("", |d| d.worker_id.as_str()));
        let model = access.model.clone();
        Self {
            inner,
            guard: EndGuard::new(up, legs).with_access(access, stream),
            model,
            worker,
            stream,
            done: false,
            api,
            started: started.at,
            last_data: None,
            remaining: None,
            first: None,
            idle: None,
            _inflight: (started.inflight, started.admitted),
        }
    }

    /// Declares the body's `content-length`, so its end is known at its last byte.
    pub fn with_length(mut self, length: Option<u64>) -> Self {
        self.remaining = length;
        self
    }

    /// Relays `first` (already read from the body) before the rest.
    pub fn with_first(mut self, first: Option<Frame<Bytes>>) -> Self {
        self.first = first;
        self
    }

    /// Ends the answer as failed when no frame comes for `timeout` (`None`: never).
    pub fn with_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle = timeout.map(|t| (t, Box::pin(tokio::time::sleep(t))));
        self
    }

    /// Counts a frame and passes it on; the end is seen at a body's last byte.
    fn pass(&mut self, frame: Frame<Bytes>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.observe(&frame);
        if let Some((t, sleep)) = &mut self.idle {
            sleep.as_mut().reset(tokio::time::Instant::now() + *t);
        }
        // A body of known length is complete with its last byte: the server writes it and does
        // not poll again, so the end is seen here, not only at `None`.
        if let (Some(data), Some(left)) = (frame.data_ref(), self.remaining.as_mut()) {
            *left = left.saturating_sub(data.len() as u64);
        }
        if self.remaining == Some(0) || self.inner.is_end_stream() {
            self.guard.end(ReleaseReason::Eof);
            self.done = true;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn fail(&mut self, e: ProxyError) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.guard.fail(&e);
        self.done = true;
        if self.stream {
            Poll::Ready(Some(Ok(Frame::data(e.sse_event(crate::envelope::Envelope::of(self.api))))))
        } else {
            Poll::Ready(Some(Err(Box::new(e))))
        }
    }

    fn observe(&mut self, frame: &Frame<Bytes>) {
        let Some(data) = frame.data_ref().filter(|d| !d.is_empty()) else { return };
        let now = Instant::now();
        let metrics = &self.guard.up.metrics;
        match self.last_data {
            None => {
                let ttft = (now - self.started).as_secs_f64();
                metrics.ttft(self.api.as_str(), &self.model, ttft);
                metrics.served.worker_ttft(&self.model, &self.worker, ttft);
                self.guard.seen.first_byte = Some(now);
            }
            Some(prev) => {
                metrics.itl((now - prev).as_secs_f64());
                metrics.served.worker_itl(&self.model, &self.worker, (now - prev).as_secs_f64());
            }
        }
        self.last_data = Some(now);
        self.guard.seen.usage.feed(data);
    }
}

impl HttpBody for Relay {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        // The first frame goes out before anything else: the attempt was judged on it.
        if let Some(first) = this.first.take() {
            return this.pass(first);
        }
        // Pending while the prefill leg runs; `None` once it finished without failing.
        if let Poll::Ready(Some(e)) = this.guard.legs.poll_prefill_failed(cx) {
            return this.fail(e);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_pending()
            && let Some((silence, sleep)) = &mut this.idle
        {
            ready!(sleep.as_mut().poll(cx));
            let (silence, url) = (*silence, this.guard.legs.decode().map(|d| d.url.clone()));
            this.guard.up.metrics.upstream_error(Leg::Decode);
            return this.fail(ProxyError::Upstream {
                leg: Leg::Decode,
                url: url.unwrap_or_default(),
                reason: format!("no data for --stream-idle-timeout-ms ({silence:?})"),
                failure: LegFailure::Timeout,
            });
        }
        match ready!(polled) {
            Some(Ok(frame)) => this.pass(frame),
            Some(Err(e)) => {
                this.guard.up.metrics.upstream_error(Leg::Decode);
                let url = this.guard.legs.decode().map(|d| d.url.clone()).unwrap_or_default();
                this.fail(ProxyError::Upstream {
                    leg: Leg::Decode,
                    url,
                    reason: format!("stream broke: {e}"),
                    failure: LegFailure::StreamCut,
                })
            }
            None => {
                this.guard.end(ReleaseReason::Eof);
                this.done = true;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        // Exact only when nothing can be appended (no prefill leg still able to fail).
        let exact = !self.guard.legs.prefill_may_fail() && self.first.is_none() && !self.done;
        if exact { self.inner.size_hint() } else { SizeHint::default() }
    }
}

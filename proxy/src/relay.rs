//! The decode answer, relayed frame by frame as it arrives, with the request's end observed
//! once: EOF releases `EOF`; an upstream error, a failed prefill or a stream silent for
//! `--stream-idle-timeout-ms` releases `FAILED` (a stream gets an SSE error event and
//! `[DONE]`); the client going away — the body dropped before its end — releases `CANCELLED`
//! and aborts both upstream legs.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use infera_proto::types::{Api, LegFailure, ReleaseReason, RequestId};
use tokio::sync::oneshot;

use crate::access::{Access, Seen};
use crate::admission::Admitted;
use crate::body::BodyError;
use crate::control::Pick;
use crate::error::{Leg, ProxyError};
use crate::metrics::InflightGuard;
use crate::prefill::{PrefillCancel, PrefillLeg};
use crate::upstream::{Upstreams, abort};
use crate::usage::UsageTap;

/// The end of a request: releases the decode reservation exactly once, cancels the prefill
/// leg and aborts upstream work when the request did not end normally.
#[derive(Debug)]
pub struct EndGuard {
    up: Upstreams,
    decode: Option<Pick>,
    prefill_cancel: Option<PrefillCancel>,
    rid: RequestId,
    done: bool,
    /// The request's record, written at its end (`None` once written, or never kept).
    access: Option<Access>,
    /// What the relay saw of the answer.
    seen: Seen,
}

impl EndGuard {
    /// Guards the decode pick of a dispatched request.
    pub fn new(up: Upstreams, decode: Pick, prefill_cancel: Option<PrefillCancel>, rid: RequestId) -> Self {
        let seen = Seen { first_byte: None, usage: UsageTap::new(false) };
        Self { up, decode: Some(decode), prefill_cancel, rid, done: false, access: None, seen }
    }

    /// Writes `access` when the request ends (the access line, tokens, duration).
    pub fn with_access(mut self, access: Access, stream: bool) -> Self {
        self.access = Some(access);
        self.seen.usage = UsageTap::new(stream);
        self
    }

    /// Ends the request with `reason` (once; later calls do nothing).
    pub fn end(&mut self, reason: ReleaseReason) {
        self.end_with(reason, None);
    }

    /// Ends the request with `reason`; a decode leg that failed says how (`failure`).
    pub fn end_with(&mut self, reason: ReleaseReason, failure: Option<LegFailure>) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let Some(decode) = self.decode.take() else { return };
        if reason != ReleaseReason::Eof {
            if let Some(cancel) = self.prefill_cancel.take() {
                cancel.cancel(reason);
            }
            abort(&self.up.client, &decode.endpoint.url, &self.rid);
        }
        match failure {
            Some(f) => decode.fail(f),
            None => decode.release(reason),
        }
        // On EOF the prefill leg finishes on its own.
        if let Some(cancel) = self.prefill_cancel.take() {
            cancel.detach();
        }
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
    /// The decode leg, released when the answer ends.
    pub decode: Pick,
    /// The prefill leg (PD).
    pub prefill: Option<PrefillLeg>,
    /// The id the engines know the answering attempt by, named when they are asked to abort.
    pub request_id: RequestId,
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
    prefill_failed: Option<oneshot::Receiver<ProxyError>>,
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
        let Relayed { up, decode, prefill, request_id, api, access, stream, started } = request;
        let (failed, cancel) = match prefill {
            Some(p) => (p.failed, Some(p.cancel)),
            None => (None, None),
        };
        let worker = Arc::from(decode.endpoint.worker_id.as_str());
        let model = access.model.clone();
        Self {
            inner,
            prefill_failed: failed,
            guard: EndGuard::new(up, decode, cancel, request_id).with_access(access, stream),
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
        // Counted against the decode target only when its own leg failed.
        let failure = e.leg_failure().filter(|(leg, _)| *leg == Leg::Decode).and_then(|(_, f)| f);
        self.guard.end_with(ReleaseReason::Failed, failure);
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
        if let Some(rx) = &mut this.prefill_failed {
            match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(e)) => {
                    this.prefill_failed = None;
                    return this.fail(e);
                }
                // The prefill leg finished without failing.
                Poll::Ready(Err(_)) => this.prefill_failed = None,
                Poll::Pending => {}
            }
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_pending()
            && let Some((silence, sleep)) = &mut this.idle
        {
            ready!(sleep.as_mut().poll(cx));
            let (silence, url) = (*silence, this.guard.decode.as_ref().map(|d| d.endpoint.url.clone()));
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
                let url = this.guard.decode.as_ref().map(|d| d.endpoint.url.clone()).unwrap_or_default();
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
        let exact = self.prefill_failed.is_none() && self.first.is_none() && !self.done;
        if exact { self.inner.size_hint() } else { SizeHint::default() }
    }
}

//! Prompt logprobs through PD. A `/generate` request with `return_logprob` and a
//! `logprob_start_len` asks for the prompt's logprobs, which only the prefill computes: SGLang's
//! decode answers with its `input_*` lists empty (python/sglang/srt/disaggregation/decode.py).
//! As SGLang's own PD load balancer does (`mini_lb.py` of `sglang-router`: "merge
//! `meta_info.input_token_logprobs` from prefill to decode"), the proxy keeps the prefill's
//! `meta_info.input_*` lists and puts them in front of the decode's, in a whole answer and in
//! every event of a stream (SGLang's are cumulative), item by item for a batch.
//!
//! The prefill leg reads them from its own answer ([`from_prefill`]); [`Merged`] wraps the
//! decode's relayed answer and waits for them before its first byte, at most [`PREFILL_WAIT`]
//! (the prefill answers once its KV has been pulled, before the decode's first token): past that,
//! or when the prefill leg failed, the decode's answer passes unchanged.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::body::BodyError;

/// The prompt-side lists of `meta_info` (SGLang 0.5.23 `add_logprob_to_meta_info`,
/// python/sglang/srt/managers/tokenizer_manager.py).
const FIELDS: [&str; 3] = ["input_token_logprobs", "input_top_logprobs", "input_token_ids_logprobs"];

/// How long the decode's answer waits for the prefill's prompt logprobs.
pub const PREFILL_WAIT: Duration = Duration::from_secs(30);

/// The largest prefill answer read for its logprobs (a 100 k-token prompt with 5 alternatives
/// per position is about 20 MB).
pub const MAX_PREFILL_BYTES: usize = 64 << 20;

/// Whether `body` (a `/generate` request's) asks for logprobs: `return_logprob` true, or true for
/// some item of a batch.
pub fn wanted(body: &Map<String, Value>) -> bool {
    match body.get("return_logprob") {
        Some(Value::Bool(b)) => *b,
        Some(Value::Array(items)) => items.iter().any(|v| v.as_bool() == Some(true)),
        _ => false,
    }
}

/// A prefill's prompt logprobs: the `input_*` lists of each batch item's `meta_info`, by index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrefillLogprobs {
    items: BTreeMap<u64, Map<String, Value>>,
}

impl PrefillLogprobs {
    fn keep(&mut self, index: u64, answer: &Value) {
        let Some(meta) = answer.get("meta_info").and_then(Value::as_object) else { return };
        let lists: Map<String, Value> = FIELDS
            .iter()
            .filter_map(|f| meta.get(*f).filter(|v| v.is_array()).map(|v| ((*f).into(), v.clone())))
            .collect();
        if !lists.is_empty() {
            self.items.insert(index, lists);
        }
    }

    /// Puts item `index`'s lists in front of `answer`'s own (only lists `answer` has).
    fn merge_into(&self, index: u64, answer: &mut Value) {
        let (Some(lists), Some(meta)) =
            (self.items.get(&index), answer.get_mut("meta_info").and_then(Value::as_object_mut))
        else {
            return;
        };
        for (field, prefill) in lists {
            if let (Some(Value::Array(decode)), Value::Array(prefill)) = (meta.get_mut(field), prefill) {
                let mut merged = prefill.clone();
                merged.append(decode);
                *decode = merged;
            }
        }
    }
}

/// The prompt logprobs of a prefill's answer: a JSON object, a batch's array, or an SSE stream
/// (each item's last event, by its `index`).
pub fn from_prefill(body: &[u8]) -> PrefillLogprobs {
    let mut out = PrefillLogprobs::default();
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                out.keep(i as u64, item);
            }
        }
        Ok(answer) => out.keep(0, &answer),
        Err(_) => {
            for data in body.split(|&b| b == b'\n').filter_map(|line| line.strip_prefix(b"data:")) {
                if let Ok(event) = serde_json::from_slice::<Value>(data.trim_ascii()) {
                    out.keep(index_of(&event), &event);
                }
            }
        }
    }
    out
}

fn index_of(event: &Value) -> u64 {
    event.get("index").and_then(Value::as_u64).unwrap_or(0)
}

/// A whole decode answer with the prefill's lists merged in (unchanged when it is not JSON).
fn merge_whole(logprobs: &PrefillLogprobs, body: &[u8]) -> Bytes {
    let Ok(mut answer) = serde_json::from_slice::<Value>(body) else { return Bytes::copy_from_slice(body) };
    match &mut answer {
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                logprobs.merge_into(i as u64, item);
            }
        }
        one => logprobs.merge_into(0, one),
    }
    serde_json::to_vec(&answer).map_or_else(|_| Bytes::copy_from_slice(body), Bytes::from)
}

/// One SSE event (without its blank line) with the prefill's lists merged into its data.
fn merge_event(logprobs: &PrefillLogprobs, event: &[u8], out: &mut BytesMut) {
    let merged = event
        .strip_prefix(b"data:")
        .map(<[u8]>::trim_ascii)
        .filter(|d| *d != b"[DONE]")
        .and_then(|d| serde_json::from_slice::<Value>(d).ok())
        .and_then(|mut v| {
            logprobs.merge_into(index_of(&v), &mut v);
            serde_json::to_vec(&v).ok()
        });
    match merged {
        Some(json) => {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(&json);
        }
        None => out.extend_from_slice(event),
    }
    out.extend_from_slice(b"\n\n");
}

/// Where [`Merged`] is with the prefill's lists.
enum Prefill {
    /// Not received yet; the wait's deadline starts at the first poll.
    Waiting(oneshot::Receiver<PrefillLogprobs>, Option<Pin<Box<tokio::time::Sleep>>>),
    /// Received (empty when the leg failed or the wait ran out).
    Known(PrefillLogprobs),
}

/// The decode's answer (`inner`) with the prefill's prompt logprobs merged in.
pub struct Merged<B> {
    inner: B,
    prefill: Prefill,
    stream: bool,
    /// Bytes not yet sent: a whole answer, or a stream's incomplete event.
    pending: BytesMut,
    ready: VecDeque<Frame<Bytes>>,
    done: bool,
}

impl<B> std::fmt::Debug for Merged<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged")
            .field("stream", &self.stream)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<B> Merged<B> {
    /// Merges what `prefill` sends into `inner`, an SSE stream when `stream`.
    pub fn new(inner: B, prefill: oneshot::Receiver<PrefillLogprobs>, stream: bool) -> Self {
        let prefill = Prefill::Waiting(prefill, None);
        Self { inner, prefill, stream, pending: BytesMut::new(), ready: VecDeque::new(), done: false }
    }

    /// The prefill's lists once known (`Pending` until then).
    fn prefill(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Prefill::Waiting(rx, deadline) = &mut self.prefill {
            let known = match Pin::new(rx).poll(cx) {
                Poll::Ready(got) => got.unwrap_or_default(),
                Poll::Pending => {
                    let sleep = deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(PREFILL_WAIT)));
                    ready!(sleep.as_mut().poll(cx));
                    tracing::warn!(
                        wait_s = PREFILL_WAIT.as_secs(),
                        "the prefill's prompt logprobs did not come; the decode's answer goes without them"
                    );
                    PrefillLogprobs::default()
                }
            };
            self.prefill = Prefill::Known(known);
        }
        Poll::Ready(())
    }

    fn known(&self) -> &PrefillLogprobs {
        match &self.prefill {
            Prefill::Known(l) => l,
            Prefill::Waiting(..) => unreachable!("read only after `prefill` is ready"),
        }
    }

    /// Takes in a data frame: a stream's complete events go out merged.
    fn take(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
        if !self.stream {
            return;
        }
        let mut out = BytesMut::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event = self.pending.split_to(end + 2);
            merge_event(self.known(), &event[..end], &mut out);
        }
        if !out.is_empty() {
            self.ready.push_back(Frame::data(out.freeze()));
        }
    }

    /// The end of `inner`: a whole answer goes out merged, a stream's rest as it came.
    fn finish(&mut self) {
        let rest = std::mem::take(&mut self.pending);
        if rest.is_empty() {
            return;
        }
        let out = if self.stream { rest.freeze() } else { merge_whole(self.known(), &rest) };
        self.ready.push_back(Frame::data(out));
    }
}

impl<B> HttpBody for Merged<B>
where
    B: HttpBody<Data = Bytes, Error = BodyError> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        loop {
            if let Some(frame) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            ready!(this.prefill(cx));
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.take(&data),
                    Err(other) => this.ready.push_back(other),
                },
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    this.finish();
                    this.done = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.ready.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests;

//! The first byte. An attempt counts as answered, and may no longer be retried, only once
//! something has come that the client would see: a stream's first data frame that is not the
//! engine's own error event, or a non-streamed answer's head (which comes with the whole answer).
//! Until then, a failure of either leg, an error event from the engine or the attempt's
//! deadline (`--attempt-timeout-ms`, if set) fails the attempt, blamed
//! on the leg that caused it
//! ([`blame`]), and the request is picked again elsewhere.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use infera_proto::types::{Api, LegFailure};
use tokio::time::Instant;

use crate::error::{Leg, ProxyError};
use crate::prefill::PrefillLeg;

/// How long a failed decode waits to learn whether its prefill failed first: SGLang's decode
/// fails when its KV transfer does, so the prefill's own failure is the cause and arrives about
/// as soon.
pub const BLAME_GRACE: Duration = Duration::from_millis(250);

/// The leg worker URLs an attempt's errors name.
#[derive(Clone, Copy, Debug)]
pub struct Urls<'a> {
    /// The decode worker.
    pub decode: &'a str,
    /// The prefill worker (PD).
    pub prefill: Option<&'a str>,
}

/// What the prefill leg did, asked once the decode failed.
enum PrefillOutcome {
    Failed(ProxyError),
    Finished,
    Running,
}

async fn prefill_outcome(prefill: &mut PrefillLeg, wait: Duration) -> PrefillOutcome {
    let Some(failed) = prefill.failed.as_mut() else { return PrefillOutcome::Finished };
    match tokio::time::timeout(wait, failed).await {
        Ok(Ok(e)) => PrefillOutcome::Failed(e),
        Ok(Err(_)) => {
            prefill.failed = None;
            PrefillOutcome::Finished
        }
        Err(_) => PrefillOutcome::Running,
    }
}

/// Whether a decode failure may be its KV's: it accepted the request and then failed inside
/// its stream or went silent (a decode that refuses at its head failed by itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suspect {
    /// The decode's own failure unless the prefill failed too.
    Decode,
    /// The KV transfer: a prefill still running is blamed.
    KvTransfer,
}

/// The error an attempt whose decode failed with `decode` ends with. In PD the decode's failure
/// is often the prefill's (its KV never came): a prefill that failed within [`BLAME_GRACE`] is
/// the cause; with [`Suspect::KvTransfer`] one still running is blamed for the missing KV
/// (`Timeout`); otherwise the decode is.
pub async fn blame(
    decode: ProxyError,
    prefill: Option<&mut PrefillLeg>,
    urls: Urls<'_>,
    suspect: Suspect,
) -> ProxyError {
    let Some(prefill) = prefill else { return decode };
    let kv_wait = suspect == Suspect::KvTransfer;
    match prefill_outcome(prefill, BLAME_GRACE).await {
        PrefillOutcome::Failed(e) => e,
        PrefillOutcome::Running if kv_wait => ProxyError::Upstream {
            leg: Leg::Prefill,
            url: urls.prefill.unwrap_or_default().to_owned(),
            reason: format!("its KV had not come when the decode gave up ({decode})"),
            failure: LegFailure::Timeout,
        },
        _ => decode,
    }
}

/// The message of an engine error event (`data: {"error": …}`, which SGLang writes into a
/// stream whose request failed), if `data` (a stream of `api`) starts with one. On
/// `/v1/messages` SGLang opens even a failed stream with `message_start`, then its `error` event
/// (`event: error`, `data: {"type": "error", "error": …}`; `_flush_on_error` in
/// python/sglang/srt/entrypoints/anthropic/serving.py): a leading `message_start` is passed over.
/// The OpenAI routes' error event is a bare `data:` line: anything else is relayed as it came.
pub fn engine_error(data: &[u8], api: Api) -> Option<String> {
    let text = std::str::from_utf8(data).ok()?.trim_start();
    if !api.is_anthropic() {
        let event = text.strip_prefix("data:")?.lines().next()?.trim();
        let v: serde_json::Value = serde_json::from_str(event).ok()?;
        let error = v.get("error")?;
        let message = error.get("message").and_then(|m| m.as_str()).or_else(|| error.as_str());
        return Some(message.unwrap_or("engine error").to_owned());
    }
    for event in text.split("\n\n") {
        let data = event.lines().find_map(|l| l.strip_prefix("data:"))?.trim();
        let v: serde_json::Value = serde_json::from_str(data).ok()?;
        if v.get("type").and_then(|t| t.as_str()) == Some("message_start") {
            continue;
        }
        let error = v.get("error")?;
        let message = error.get("message").and_then(|m| m.as_str()).or_else(|| error.as_str());
        return Some(message.unwrap_or("engine error").to_owned());
    }
    None
}

/// The attempt's deadline passed before its first byte.
pub fn timed_out(after: Duration, prefill: Option<&mut PrefillLeg>, urls: Urls<'_>) -> ProxyError {
    let prefill_running = prefill.is_some_and(|p| p.failed.is_some());
    let (leg, url) = match urls.prefill {
        Some(url) if prefill_running => (Leg::Prefill, url),
        _ => (Leg::Decode, urls.decode),
    };
    ProxyError::Upstream {
        leg,
        url: url.to_owned(),
        reason: format!("no first byte within --attempt-timeout-ms ({after:?})"),
        failure: LegFailure::Timeout,
    }
}

/// Waits for `work` while a prefill failure or the attempt's `deadline` fails the attempt
/// first (a prefill leg that finishes without failing is no longer watched).
pub async fn race<T>(
    work: impl Future<Output = T>,
    mut prefill: Option<&mut PrefillLeg>,
    urls: Urls<'_>,
    deadline: Option<(Instant, Duration)>,
) -> Result<T, ProxyError> {
    let mut work = std::pin::pin!(work);
    let mut expired = std::pin::pin!(async {
        match deadline {
            Some((at, _)) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    });
    loop {
        let failed = prefill.as_deref_mut().and_then(|p| p.failed.as_mut());
        let prefill_failed = async {
            match failed {
                Some(rx) => Some(rx.await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = &mut work => return Ok(out),
            done = prefill_failed => match done {
                Some(Ok(e)) => return Err(e),
                // The prefill leg finished without failing.
                _ => if let Some(p) = prefill.as_deref_mut() { p.failed = None },
            },
            () = &mut expired => {
                let after = deadline.map(|(_, d)| d).unwrap_or_default();
                return Err(timed_out(after, prefill, urls));
            }
        }
    }
}

/// The next frame of `body` that is not an empty data frame.
async fn next_frame(body: &mut Incoming) -> Option<Result<Frame<Bytes>, hyper::Error>> {
    loop {
        match body.frame().await {
            Some(Ok(frame)) if frame.data_ref().is_some_and(Bytes::is_empty) => {}
            other => return other,
        }
    }
}

/// Reads a stream up to its first data frame (`None`: it ended with none), while a prefill
/// failure, an engine error event or `deadline` fails the attempt.
pub async fn first_frame(
    body: &mut Incoming,
    api: Api,
    mut prefill: Option<&mut PrefillLeg>,
    urls: Urls<'_>,
    deadline: Option<(Instant, Duration)>,
) -> Result<Option<Frame<Bytes>>, ProxyError> {
    let frame = match race(next_frame(body), prefill.as_deref_mut(), urls, deadline).await? {
        None => return Ok(None),
        Some(Err(e)) => {
            let cut = ProxyError::Upstream {
                leg: Leg::Decode,
                url: urls.decode.to_owned(),
                reason: format!("stream broke before its first byte: {e}"),
                failure: LegFailure::StreamCut,
            };
            return Err(blame(cut, prefill, urls, Suspect::Decode).await);
        }
        Some(Ok(frame)) => frame,
    };
    if let Some(message) = frame.data_ref().and_then(|data| engine_error(data, api)) {
        let status = http::StatusCode::INTERNAL_SERVER_ERROR;
        let e = ProxyError::UpstreamStatus {
            leg: Leg::Decode,
            url: urls.decode.to_owned(),
            status,
            body: message,
        };
        return Err(blame(e, prefill, urls, Suspect::KvTransfer).await);
    }
    // A prefill that failed while the frame was on its way: the frame has not reached the
    // client yet, so the attempt may still be retried.
    match prefill.and_then(PrefillLeg::failed_by_now) {
        Some(e) => Err(e),
        None => Ok(Some(frame)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_error_events_are_told_from_tokens() {
        let sglang = br#"data: {"error": {"message": "KV transfer failed", "type": "InternalServerError", "code": 500}}

data: [DONE]

"#;
        assert_eq!(engine_error(sglang, Api::ChatCompletions).as_deref(), Some("KV transfer failed"));
        assert_eq!(engine_error(br#"data: {"error": "boom"}"#, Api::Generate).as_deref(), Some("boom"));
        let token = br#"data: {"id":"x","choices":[{"delta":{"content":"error"}}]}"#;
        assert_eq!(engine_error(token, Api::ChatCompletions), None, "a token that spells error is a token");
        assert_eq!(engine_error(b"data: [DONE]\n\n", Api::Completions), None);
        assert_eq!(engine_error(b"{\"error\": 1}", Api::ChatCompletions), None, "not an SSE event");
        assert_eq!(engine_error(&[0xff, 0xfe], Api::Messages), None);
        let start =
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\n";
        let failed = format!(
            "{start}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"api_error\",\"message\":\"KV transfer failed\"}}}}\n\n"
        );
        assert_eq!(
            engine_error(failed.as_bytes(), Api::Messages).as_deref(),
            Some("KV transfer failed"),
            "Anthropic's"
        );
        let text = format!(
            "{start}event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0}}\n\n"
        );
        assert_eq!(engine_error(text.as_bytes(), Api::Messages), None, "an Anthropic stream that began");
        assert_eq!(engine_error(start.as_bytes(), Api::Messages), None, "message_start alone");
        // An `event: error` on an OpenAI route is not SGLang's: relayed as it came.
        let named = b"event: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n";
        assert_eq!(engine_error(named, Api::ChatCompletions), None);
    }
}

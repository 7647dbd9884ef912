//! The token counts an engine's answer reports, read from the answer as it is relayed: OpenAI's
//! `usage` (`prompt_tokens`/`completion_tokens`; `/v1/responses`: `input_tokens`/`output_tokens`,
//! also under `response` in its stream's last event) and `/generate`'s `meta_info`
//! (`prompt_tokens`/`completion_tokens`; a batch answers a list, summed), and Anthropic's
//! `usage` on `/v1/messages` (`input_tokens`, with `cache_read_input_tokens` apart, and
//! `output_tokens`). A stream is read from its last event that parses (OpenAI streams carry usage
//! only when the client asked `stream_options.include_usage`); an Anthropic stream says its input
//! tokens in its first event, `message_start`, and its output tokens in `message_delta`, before
//! `message_stop` (python/sglang/srt/entrypoints/anthropic/serving.py). A whole answer is read
//! from its body, up to [`BODY_CAP`] bytes.

use bytes::Bytes;
use serde_json::Value;

/// The longest whole answer read for its usage; a longer one (a large batch of embeddings)
/// reports none, so that no answer costs the proxy more than parsing this much JSON.
pub const BODY_CAP: usize = 256 << 10;

/// The first frames of a stream looked at for Anthropic's `message_start` (SGLang writes it
/// once the first chunk with usage or content arrives, after at most a role chunk).
const START_FRAMES: usize = 4;

/// Token counts an answer reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub prompt: Option<u64>,
    /// Completion (output) tokens.
    pub completion: Option<u64>,
}

/// Keeps what an answer's usage is read from: a stream's last two frames (an event may span
/// two), or a whole body up to [`BODY_CAP`]. Frames are kept by reference, not copied.
#[derive(Debug, Default)]
pub struct UsageTap {
    stream: bool,
    kept: Vec<Bytes>,
    kept_bytes: usize,
    over_cap: bool,
    /// Frames of a stream seen so far (up to [`START_FRAMES`]).
    frames: usize,
    /// The input tokens of an Anthropic stream's `message_start`.
    started: Option<u64>,
}

impl UsageTap {
    /// A tap for a stream (`true`) or a whole answer.
    pub fn new(stream: bool) -> Self {
        Self { stream, ..Self::default() }
    }

    /// Sees one data frame of the answer.
    pub fn feed(&mut self, data: &Bytes) {
        if data.is_empty() || self.over_cap {
            return;
        }
        if self.stream {
            if self.frames < START_FRAMES {
                self.frames += 1;
                self.started = self.started.or_else(|| message_start(data));
            }
            self.kept.push(data.clone());
            if self.kept.len() > 2 {
                self.kept.remove(0);
            }
            return;
        }
        self.kept_bytes += data.len();
        if self.kept_bytes > BODY_CAP {
            self.over_cap = true;
            self.kept.clear();
        } else {
            self.kept.push(data.clone());
        }
    }

    /// What the answer reported.
    pub fn usage(&self) -> Usage {
        let bytes: Vec<u8> = self.kept.iter().flat_map(|b| b.iter().copied()).collect();
        if !self.stream {
            return serde_json::from_slice::<Value>(&bytes).map(|v| of_value(&v)).unwrap_or_default();
        }
        let text = String::from_utf8_lossy(&bytes);
        let usage = events(&text)
            .rev()
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .find(|v| v.get("type").and_then(Value::as_str) != Some("message_stop"))
            .map(|v| of_value(&v))
            .unwrap_or_default();
        Usage { prompt: usage.prompt.or(self.started), ..usage }
    }
}

/// The data of each SSE event in `text`, `[DONE]` left out.
fn events(text: &str) -> std::vec::IntoIter<&str> {
    let events: Vec<&str> = text
        .split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data:")).map(str::trim))
        .filter(|data| *data != "[DONE]")
        .collect();
    events.into_iter()
}

/// The input tokens of an Anthropic `message_start` event in `frame`.
fn message_start(frame: &Bytes) -> Option<u64> {
    let text = std::str::from_utf8(frame).ok().filter(|t| t.contains("\"message_start\""))?;
    events(text)
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find(|v| v.get("type").and_then(Value::as_str) == Some("message_start"))
        .and_then(|v| of_value(&v).prompt)
}

/// The usage in one answer object (or a batch's list of them).
fn of_value(v: &Value) -> Usage {
    if let Value::Array(items) = v {
        let parts: Vec<Usage> = items.iter().map(of_value).collect();
        let sum = |f: fn(&Usage) -> Option<u64>| parts.iter().map(f).sum::<Option<u64>>();
        return Usage { prompt: sum(|u| u.prompt), completion: sum(|u| u.completion) };
    }
    let num = |o: &Value, keys: [&str; 2]| keys.iter().find_map(|k| o.get(k).and_then(Value::as_u64));
    // Anthropic counts the prompt's cached tokens apart from `input_tokens`.
    let cached = |o: &Value| o.get("cache_read_input_tokens").and_then(Value::as_u64).unwrap_or(0);
    let from = |o: &Value| Usage {
        prompt: num(o, ["prompt_tokens", "input_tokens"]).map(|p| p + cached(o)),
        completion: num(o, ["completion_tokens", "output_tokens"]),
    };
    for path in ["/usage", "/meta_info", "/response/usage", "/message/usage"] {
        if let Some(o) = v.pointer(path).filter(|o| o.is_object()) {
            return from(o);
        }
    }
    Usage::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tap(stream: bool, frames: &[&str]) -> Usage {
        let mut t = UsageTap::new(stream);
        for f in frames {
            t.feed(&Bytes::copy_from_slice(f.as_bytes()));
        }
        t.usage()
    }

    #[test]
    fn whole_answers_report_openai_usage_and_generate_meta_info() {
        let both = |p, c| Usage { prompt: Some(p), completion: Some(c) };
        let chat = r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#;
        assert_eq!(tap(false, &[&chat[..20], &chat[20..]]), both(12, 5), "split over two frames");
        assert_eq!(
            tap(false, &[r#"{"text":"x","meta_info":{"prompt_tokens":3,"completion_tokens":2}}"#]),
            both(3, 2)
        );
        let batch = r#"[{"meta_info":{"prompt_tokens":3,"completion_tokens":2}},{"meta_info":{"prompt_tokens":4,"completion_tokens":1}}]"#;
        assert_eq!(tap(false, &[batch]), both(7, 3));
        assert_eq!(
            tap(false, &[r#"{"object":"response","usage":{"input_tokens":9,"output_tokens":4}}"#]),
            both(9, 4)
        );
        let embeddings = r#"{"data":[],"usage":{"prompt_tokens":6,"total_tokens":6}}"#;
        assert_eq!(tap(false, &[embeddings]), Usage { prompt: Some(6), completion: None });
        assert_eq!(tap(false, &["not json"]), Usage::default());
    }

    #[test]
    fn streams_report_their_last_event_with_usage() {
        let events = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
        ];
        assert_eq!(tap(true, &events), Usage { prompt: Some(8), completion: Some(2) });
        // Without include_usage: nothing reported.
        let bare = ["data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", "data: [DONE]\n\n"];
        assert_eq!(tap(true, &bare), Usage::default());
        // /generate: every event carries meta_info; the last one counts.
        let generate = [
            "data: {\"text\":\"a\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\n",
            "data: {\"text\":\"ab\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n",
        ];
        assert_eq!(tap(true, &generate), Usage { prompt: Some(4), completion: Some(2) });
        let responses = [
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":3}}}\n\n",
        ];
        assert_eq!(tap(true, &responses), Usage { prompt: Some(5), completion: Some(3) });
    }

    #[test]
    fn anthropic_messages_report_input_from_message_start_and_output_from_message_delta() {
        let both = |p, c| Usage { prompt: Some(p), completion: Some(c) };
        let whole =
            r#"{"id":"msg_1","type":"message","content":[],"usage":{"input_tokens":7,"output_tokens":3}}"#;
        assert_eq!(tap(false, &[whole]), both(7, 3));
        let cached =
            r#"{"type":"message","usage":{"input_tokens":2,"cache_read_input_tokens":5,"output_tokens":1}}"#;
        assert_eq!(tap(false, &[cached]), both(7, 1), "the cached prompt tokens count as input");
        let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"usage\":{\"input_tokens\":11,\"output_tokens\":0}}}\n\n";
        let block = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
        let delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n";
        let end = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
                   event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":4}}\n\n";
        let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        assert_eq!(tap(true, &[start, block, delta, delta, delta, end, stop]), both(11, 4));
        assert_eq!(
            tap(true, &[&format!("{start}{block}{delta}"), end, stop]),
            both(11, 4),
            "events share frames"
        );
        // A stream cut before its end: the input tokens alone.
        assert_eq!(tap(true, &[start, block, delta]), Usage { prompt: Some(11), completion: None });
    }

    #[test]
    fn a_whole_answer_over_the_cap_reports_nothing() {
        let mut t = UsageTap::new(false);
        t.feed(&Bytes::from(vec![b' '; BODY_CAP]));
        t.feed(&Bytes::from_static(br#"{"usage":{"prompt_tokens":1}}"#));
        assert_eq!(t.usage(), Usage::default());
    }
}

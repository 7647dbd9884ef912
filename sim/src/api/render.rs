//! Flow events → the bytes of one route: SSE events (`data: <json>\n\n` … `data: [DONE]\n\n`) or
//! one JSON body, in the shapes of SGLang 0.5.23 (python/sglang/srt/entrypoints/http_server.py for
//! `/generate`; python/sglang/srt/entrypoints/openai/serving_chat.py, serving_completions.py,
//! serving_responses.py and sse_utils.py for the OpenAI routes; anthropic/serving.py for
//! `/v1/messages`; `manual/reference/sim.md` lists
//! them). [`Render`] keeps what every route needs (ids, the text so far); each route's shapes live
//! in its own module.

mod chat;
mod completions;
mod generate;
mod logprobs;
mod messages;
mod responses;

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use infera_proto::types::Api;
use serde_json::{Value, json};

pub use crate::flow::Finish;

use super::input::LogprobRequest;
use crate::error::ApiError;
use crate::flow::Run;
use crate::stop;
use crate::tokens;

/// One render step: the new text, the whole text, and the end if this is the last step.
#[derive(Debug)]
pub struct Step<'a> {
    /// Text added by this step.
    pub delta: &'a str,
    /// Token ids so far.
    pub ids: &'a [u32],
    /// Text so far.
    pub text: &'a str,
    /// Tokens before this step.
    pub prev: u32,
    /// Tokens so far.
    pub tokens: u32,
    /// Cached prompt tokens.
    pub cached: u32,
    /// Set on the last step.
    pub finish: Option<&'a Finish>,
}

/// What a request asked of its rendering, beyond its tokens.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `--enable-cache-report`: usage carries `prompt_tokens_details.cached_tokens`.
    pub cache_report: bool,
    /// Logprobs asked for.
    pub logprobs: Option<LogprobRequest>,
    /// DP ranks of the worker (`meta_info.dp_rank` is null with one).
    pub ranks: u32,
    /// The request body (`/v1/responses` echoes its settings).
    pub body: Value,
    /// This completion's index among the request's `n` (OpenAI `choices[].index`).
    pub index: u32,
}

/// A route's rendering state for one request.
#[derive(Debug)]
pub struct Render {
    /// The API whose shapes are rendered.
    pub route: Api,
    /// `meta_info.id`, the OpenAI `id`.
    pub rid: String,
    /// `model`.
    pub model: String,
    /// `created` (Unix seconds, when the request arrived).
    pub created: u64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// DP rank used.
    pub rank: u32,
    /// PD prefill leg (`finish_reason.length` is 0).
    pub prefill_leg: bool,
    /// The prompt positions whose logprobs were asked for.
    pub prompt_logprobs: crate::flow::PromptSpan,
    /// The request's options.
    pub options: RenderOptions,
    started: tokio::time::Instant,
    seed: u64,
    rid_hash: u64,
    ids: Vec<u32>,
    text: String,
    /// Whether nothing was streamed yet (chat's role chunk goes first).
    pub first: bool,
    /// The next `/v1/responses` event's `sequence_number`.
    sequence: u64,
}

impl Render {
    /// Rendering for `run` on `route`.
    pub fn new(
        route: Api,
        run: &Run,
        model: String,
        options: RenderOptions,
        seed: u64,
        created: u64,
    ) -> Self {
        Self {
            route,
            rid_hash: tokens::hash_str(&run.rid),
            rid: run.rid.clone(),
            model,
            created,
            prompt_tokens: run.prompt_tokens,
            rank: run.rank,
            prefill_leg: run.prefill_leg,
            prompt_logprobs: run.prompt_logprobs.clone(),
            options,
            started: run.started,
            seed,
            ids: Vec::new(),
            text: String::new(),
            first: true,
            sequence: 0,
        }
    }

    /// SSE bytes for more tokens.
    pub fn tokens(&mut self, tokens: u32, cached: u32) -> Bytes {
        let events = self.events(tokens, cached, None);
        self.first = false;
        self.sse(&events, false)
    }

    /// SSE bytes for the end, then `[DONE]` (none after `/v1/responses`' and `/v1/messages`'
    /// last event).
    pub fn done(&mut self, tokens: u32, cached: u32, finish: &Finish) -> Bytes {
        let events = self.events(tokens, cached, Some(finish));
        self.sse(&events, !matches!(self.route, Api::Responses | Api::Messages))
    }

    fn events(
        &mut self,
        tokens: u32,
        cached: u32,
        finish: Option<&Finish>,
    ) -> Vec<(Option<&'static str>, Value)> {
        let mut events = self.step(tokens, cached, finish, |r, s| match r.route {
            Api::Generate => vec![generate::event(r, s)],
            Api::ChatCompletions => chat::chunks(r, s),
            Api::Completions => completions::chunks(r, s),
            Api::Responses => responses::events(r, s),
            Api::Messages => messages::events(r, s),
            // The pooling routes answer in one body of their own (`crate::api::pooling`).
            Api::Embeddings | Api::Rerank | Api::Classify => Vec::new(),
        });
        if self.route == Api::Responses {
            for (_, data) in &mut events {
                if let Some(seq) = data.get_mut("sequence_number") {
                    *seq = json!(self.sequence);
                    self.sequence += 1;
                }
            }
        }
        events
    }

    /// SSE bytes for an error after the stream started, then `[DONE]` (`/v1/messages`: its
    /// `error` and `message_stop` events).
    pub fn failed(&self, e: &ApiError) -> Bytes {
        if self.route == Api::Messages {
            return self.sse(&messages::failed(e.stream_event(self.route)), false);
        }
        self.sse(&[(None, e.stream_event(self.route))], true)
    }

    /// The whole (non-stream) body.
    pub fn whole(&mut self, tokens: u32, cached: u32, finish: &Finish) -> Value {
        self.step(tokens, cached, Some(finish), |r, s| match r.route {
            Api::Generate => generate::event(r, s).1,
            Api::ChatCompletions => chat::body(r, s),
            Api::Completions => completions::body(r, s),
            Api::Responses => responses::body(r, s),
            Api::Messages => messages::body(r, s),
            Api::Embeddings | Api::Rerank | Api::Classify => Value::Null,
        })
    }

    fn step<T>(
        &mut self,
        tokens: u32,
        cached: u32,
        finish: Option<&Finish>,
        f: impl FnOnce(&Self, &Step<'_>) -> T,
    ) -> T {
        let prev = self.ids.len() as u32;
        let before = self.text.len();
        for i in prev..tokens {
            let (id, word) = tokens::output_token(self.seed, self.rid_hash, i);
            if i > 0 {
                self.text.push(' ');
            }
            self.ids.push(id);
            self.text.push_str(word);
        }
        // SGLang trims the text before a matched stop string.
        let mut text = std::mem::take(&mut self.text);
        if let Some(Finish::Stop(s)) = finish {
            text = stop::trim_at(&text, s);
        }
        let from = before.min(text.len());
        let step = Step { delta: &text[from..], ids: &self.ids, text: &text, prev, tokens, cached, finish };
        let out = f(self, &step);
        self.text = text;
        out
    }

    /// Seconds since the request arrived.
    pub fn e2e_latency(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Logprob positions `s.prev..s.tokens` (or all so far when `all`), if asked for.
    fn positions(&self, s: &Step<'_>, all: bool) -> Option<Vec<logprobs::Position>> {
        let top = self.options.logprobs?.top;
        let from = if all { 0 } else { s.prev };
        Some(logprobs::positions(self.seed, self.rid_hash, from, s.tokens, top))
    }

    /// OpenAI `usage`; with `--enable-cache-report`, the cached prompt tokens as SGLang reports
    /// them.
    pub fn usage(&self, tokens: u32, cached: u32) -> Value {
        let details =
            if self.options.cache_report { json!({ "cached_tokens": cached }) } else { Value::Null };
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + tokens,
            "completion_tokens": tokens,
            "prompt_tokens_details": details,
            "reasoning_tokens": 0,
            "completion_tokens_details": null,
        })
    }

    /// OpenAI `metadata` of a whole body: the weight version the tokens came from
    /// (`build_endpoint_weight_version_metadata`, python/sglang/srt/utils/weight_versions.py).
    pub fn metadata(tokens: u32) -> Value {
        json!({ "weight_version": "default", "weight_versions": [{ "version": "default", "start": 0, "end": tokens }] })
    }

    /// `(event name, data)` pairs as SSE; `[DONE]` last when `done`.
    fn sse(&self, events: &[(Option<&'static str>, Value)], done: bool) -> Bytes {
        let mut out = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                out.push_str("event: ");
                out.push_str(name);
                out.push('\n');
            }
            out.push_str("data: ");
            out.push_str(&data.to_string());
            out.push_str("\n\n");
        }
        if done {
            out.push_str("data: [DONE]\n\n");
        }
        Bytes::from(out)
    }
}

/// Seconds since the Unix epoch, as a float (`response_sent_to_client_ts`).
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Unix seconds now (OpenAI `created` is the request's arrival).
pub fn unix_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

//! A request's sampling parameters as SGLang 0.5.23 reads them from each route's body, and the
//! checks it runs before admitting the request: `SamplingParams.verify`
//! (python/sglang/srt/sampling/sampling_params.py) and `_validate_one_request`'s length checks
//! (python/sglang/srt/managers/tokenizer_manager.py). The sim samples nothing; it honours
//! `max_new_tokens`, `n`, `stop` and the logprob requests, and rejects what SGLang rejects.

use infera_proto::types::Api;
use serde_json::Value;

/// Logprobs a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogprobRequest {
    /// Alternatives per position (`top_logprobs_num`, `logprobs`, `top_logprobs`).
    pub top: u32,
    /// `/generate`'s `logprob_start_len` when it asks for prompt logprobs (≥ 0; SGLang's default
    /// -1 asks for none).
    pub prompt_from: Option<u32>,
}

/// The sampling parameters the sim reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// `max_new_tokens` (or the route's name for it) as given.
    pub max_new_tokens: Option<f64>,
    /// `min_new_tokens`.
    pub min_new_tokens: f64,
    /// `temperature`.
    pub temperature: f64,
    /// `top_p`.
    pub top_p: f64,
    /// `top_k`.
    pub top_k: f64,
    /// `min_p`.
    pub min_p: f64,
    /// `frequency_penalty`.
    pub frequency_penalty: f64,
    /// `presence_penalty`.
    pub presence_penalty: f64,
    /// `repetition_penalty`.
    pub repetition_penalty: f64,
    /// `n`: completions per prompt.
    pub n: u32,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Whether logprobs were asked for, and how many alternatives.
    pub logprobs: Option<LogprobRequest>,
    /// Whether OpenAI numbers are floats (pydantic's `float` prints `-1.0`), for messages.
    openai: bool,
}

impl Sampling {
    /// The parameters of `body` on `route`.
    pub fn of(route: Api, body: &Value) -> Self {
        let (params, openai) = match route {
            Api::Generate => (body.get("sampling_params").unwrap_or(&Value::Null), false),
            // A pooling request samples nothing: SGLang sets `max_new_tokens = 0`
            // (`EmbeddingReqInput.normalize_batch_and_arguments`, python/sglang/srt/managers/io_struct.py).
            Api::Embeddings | Api::Rerank | Api::Classify => (&Value::Null, true),
            _ => (body, true),
        };
        let num = |k: &str| params.get(k).and_then(Value::as_f64);
        let max_new_tokens = match route {
            Api::Generate => num("max_new_tokens"),
            Api::ChatCompletions => num("max_completion_tokens").or_else(|| num("max_tokens")),
            Api::Completions | Api::Messages => num("max_tokens"),
            Api::Responses => num("max_output_tokens"),
            Api::Embeddings | Api::Rerank | Api::Classify => Some(0.0),
        };
        let logprobs = match route {
            Api::Generate => {
                body.get("return_logprob").and_then(Value::as_bool).filter(|b| *b).map(|_| LogprobRequest {
                    top: body.get("top_logprobs_num").and_then(Value::as_u64).unwrap_or(0) as u32,
                    prompt_from: body.get("logprob_start_len").and_then(Value::as_u64).map(|n| n as u32),
                })
            }
            Api::Completions => body
                .get("logprobs")
                .and_then(Value::as_u64)
                .map(|n| LogprobRequest { top: n as u32, prompt_from: None }),
            Api::ChatCompletions => {
                body.get("logprobs").and_then(Value::as_bool).filter(|b| *b).map(|_| LogprobRequest {
                    top: body.get("top_logprobs").and_then(Value::as_u64).unwrap_or(0) as u32,
                    prompt_from: None,
                })
            }
            Api::Responses | Api::Messages | Api::Embeddings | Api::Rerank | Api::Classify => None,
        };
        // Anthropic's `stop_sequences` become the chat request's `stop`
        // (python/sglang/srt/entrypoints/anthropic/serving.py).
        let stop_key = if route == Api::Messages { "stop_sequences" } else { "stop" };
        let stop = match params.get(stop_key) {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        Self {
            max_new_tokens,
            min_new_tokens: num("min_new_tokens").unwrap_or(0.0),
            temperature: num("temperature").unwrap_or(1.0),
            top_p: num("top_p").unwrap_or(1.0),
            top_k: num("top_k").unwrap_or(-1.0),
            min_p: num("min_p").unwrap_or(0.0),
            frequency_penalty: num("frequency_penalty").unwrap_or(0.0),
            presence_penalty: num("presence_penalty").unwrap_or(0.0),
            repetition_penalty: num("repetition_penalty").unwrap_or(1.0),
            n: num("n").map_or(1, |n| n.max(1.0) as u32),
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            logprobs,
            openai,
        }
    }

    /// A number as SGLang prints it in a message.
    fn show(&self, x: f64) -> String {
        if self.openai && x.fract() == 0.0 { format!("{x:.1}") } else { format!("{x}") }
    }

    /// `SamplingParams.verify`: the first parameter out of range, in SGLang's words.
    pub fn verify(&self) -> Result<(), String> {
        let s = |x| self.show(x);
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(format!(
                "temperature must be a non-negative finite number, got {}.",
                s(self.temperature)
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}.", s(self.top_p)));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}.", s(self.min_p)));
        }
        if self.top_k < 1.0 && self.top_k != -1.0 {
            return Err(format!("top_k must be -1 (disable) or at least 1, got {}.", self.top_k));
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return Err(format!("frequency_penalty must be in [-2, 2], got {}.", s(self.frequency_penalty)));
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return Err(format!("presence_penalty must be in [-2, 2], got {}.", s(self.presence_penalty)));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty <= 2.0) {
            return Err(format!("repetition_penalty must be in (0, 2], got {}.", s(self.repetition_penalty)));
        }
        if self.min_new_tokens < 0.0 {
            return Err(format!(
                "min_new_tokens must be in [0, max_new_tokens], got {}.",
                self.min_new_tokens
            ));
        }
        if let Some(max) = self.max_new_tokens {
            if max < 0.0 {
                return Err(format!("max_new_tokens must be at least 0, got {max}."));
            }
            if self.min_new_tokens > max {
                return Err(format!(
                    "min_new_tokens must be in [0, max_new_tokens({max})], got {}.",
                    self.min_new_tokens
                ));
            }
        }
        Ok(())
    }

    /// `_validate_one_request`: the prompt must be shorter than the context, and the prompt
    /// plus `max_new_tokens` must fit in it.
    pub fn check_length(&self, prompt_tokens: usize, context_length: u32) -> Result<(), String> {
        let context = context_length as usize;
        if prompt_tokens >= context {
            return Err(format!(
                "The input ({prompt_tokens} tokens) is longer than the model's context length ({context} tokens)."
            ));
        }
        if let Some(max) = self.max_new_tokens.map(|m| m as usize)
            && prompt_tokens + max > context
        {
            return Err(format!(
                "Requested token count exceeds the model's maximum context length of {context} tokens. \
                 You requested a total of {} tokens: {prompt_tokens} tokens from the input messages and {max} \
                 tokens for the completion. Please reduce the number of tokens in the input messages or the \
                 completion to fit within the limit.",
                prompt_tokens + max
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_route_names_its_parameters() {
        let g = Sampling::of(
            Api::Generate,
            &json!({"sampling_params": {"max_new_tokens": 8, "stop": "x", "n": 2}, "return_logprob": true,
                    "top_logprobs_num": 3}),
        );
        assert_eq!((g.max_new_tokens, g.n, g.stop.as_slice()), (Some(8.0), 2, &["x".to_owned()][..]));
        assert_eq!(g.logprobs, Some(LogprobRequest { top: 3, prompt_from: None }));
        let c = Sampling::of(
            Api::ChatCompletions,
            &json!({"max_tokens": 9, "max_completion_tokens": 4,
            "logprobs": true, "top_logprobs": 2, "stop": ["a", ""]}),
        );
        assert_eq!(
            (c.max_new_tokens, c.logprobs, c.stop.len()),
            (Some(4.0), Some(LogprobRequest { top: 2, prompt_from: None }), 1)
        );
        let p = Sampling::of(Api::Completions, &json!({"logprobs": 0}));
        assert_eq!(p.logprobs, Some(LogprobRequest { top: 0, prompt_from: None }));
        assert_eq!(Sampling::of(Api::ChatCompletions, &json!({"logprobs": false})).logprobs, None);
        let e = Sampling::of(Api::Embeddings, &json!({"max_tokens": 9, "logprobs": true, "n": 3}));
        assert_eq!((e.max_new_tokens, e.logprobs, e.n), (Some(0.0), None, 1), "pooling samples nothing");
    }

    #[test]
    fn out_of_range_values_are_refused_in_sglangs_words() {
        let g = |p: Value| Sampling::of(Api::Generate, &json!({ "sampling_params": p })).verify();
        assert_eq!(
            g(json!({"temperature": -1})),
            Err("temperature must be a non-negative finite number, got -1.".into())
        );
        assert_eq!(g(json!({"top_p": 2})), Err("top_p must be in (0, 1], got 2.".into()));
        assert_eq!(
            g(json!({"max_new_tokens": -1})),
            Err("max_new_tokens must be at least 0, got -1.".into())
        );
        assert!(g(json!({"top_k": 0})).is_err());
        assert!(g(json!({"temperature": 0, "top_k": -1, "max_new_tokens": 0})).is_ok());
        let chat = Sampling::of(Api::ChatCompletions, &json!({"temperature": -1}));
        assert_eq!(chat.verify(), Err("temperature must be a non-negative finite number, got -1.0.".into()));
    }

    #[test]
    fn prompts_must_fit_the_context() {
        let s = Sampling::of(Api::ChatCompletions, &json!({"max_tokens": 100_000}));
        assert!(s.check_length(24_011, 4096).unwrap_err().starts_with("The input (24011 tokens) is longer"));
        assert!(s.check_length(15, 4096).unwrap_err().contains("a total of 100015 tokens"));
        assert!(Sampling::of(Api::ChatCompletions, &json!({})).check_length(15, 4096).is_ok());
    }
}

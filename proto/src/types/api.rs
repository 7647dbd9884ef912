//! The model APIs of the SGLang HTTP server that infera serves, routes and emulates: SGLang's
//! native `/generate`, its OpenAI-compatible generation routes, its Anthropic-compatible
//! `/v1/messages` (python/sglang/srt/entrypoints/anthropic/serving.py) and its pooling routes
//! (embeddings, rerank, classify: one forward pass, no decode; SGLang 0.5.23
//! python/sglang/srt/entrypoints/http_server.py). The proxy routes them, the tokenizer reads their
//! prompts, the emulated engine answers them; all three name them with [`Api`].

/// One model API: a request a worker computes, which the proxy routes through control.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Api {
    /// `POST /v1/chat/completions` (OpenAI chat).
    ChatCompletions,
    /// `POST /v1/completions` (OpenAI completions).
    Completions,
    /// `POST /generate` (SGLang native).
    Generate,
    /// `POST /v1/responses` (OpenAI responses).
    Responses,
    /// `POST /v1/messages` (Anthropic messages; SGLang converts it to a chat completion).
    Messages,
    /// `POST /v1/embeddings` (OpenAI embeddings; a model SGLang serves with `--is-embedding`).
    Embeddings,
    /// `POST /v1/rerank` (SGLang's rerank: a `query` scored against `documents`).
    Rerank,
    /// `POST /v1/classify` (SGLang's sequence classification).
    Classify,
}

impl Api {
    /// Every API.
    pub const ALL: [Self; 8] = [
        Self::ChatCompletions,
        Self::Completions,
        Self::Generate,
        Self::Responses,
        Self::Messages,
        Self::Embeddings,
        Self::Rerank,
        Self::Classify,
    ];

    /// The request path, on the proxy and on the workers alike.
    pub fn path(self) -> &'static str {
        match self {
            Self::ChatCompletions => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
            Self::Generate => "/generate",
            Self::Responses => "/v1/responses",
            Self::Messages => "/v1/messages",
            Self::Embeddings => "/v1/embeddings",
            Self::Rerank => "/v1/rerank",
            Self::Classify => "/v1/classify",
        }
    }

    /// The API served at `path`.
    pub fn from_path(path: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.path() == path)
    }

    /// A metric label (`chat_completions`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChatCompletions => "chat_completions",
            Self::Completions => "completions",
            Self::Generate => "generate",
            Self::Responses => "responses",
            Self::Messages => "messages",
            Self::Embeddings => "embeddings",
            Self::Rerank => "rerank",
            Self::Classify => "classify",
        }
    }

    /// Whether SGLang serves it with OpenAI's shapes (errors, `X-Data-Parallel-Rank`); `/generate`
    /// has SGLang's own, `/v1/messages` Anthropic's ([`Api::is_anthropic`]).
    pub fn is_openai(self) -> bool {
        !matches!(self, Self::Generate | Self::Messages)
    }

    /// Whether its errors are Anthropic's envelope, `{"type": "error", "error": {"type",
    /// "message"}}` (`_anthropic_error_response` in python/sglang/srt/entrypoints/http_server.py).
    pub fn is_anthropic(self) -> bool {
        self == Self::Messages
    }

    /// Whether it generates tokens (a prefill, then decode steps, maybe streamed, maybe through a
    /// prefill/decode pair). The pooling APIs do not: one forward pass over the input on one
    /// worker, answered in one JSON body; SGLang serves them on aggregated workers only.
    pub fn generates(self) -> bool {
        !matches!(self, Self::Embeddings | Self::Rerank | Self::Classify)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_each_api_once() {
        for api in Api::ALL {
            assert_eq!(Api::from_path(api.path()), Some(api));
        }
        assert_eq!(Api::from_path("/v1/models"), None);
        assert_eq!(Api::from_path("/generate/"), None);
    }

    #[test]
    fn the_pooling_apis_do_not_generate() {
        let pooling: Vec<Api> = Api::ALL.into_iter().filter(|a| !a.generates()).collect();
        assert_eq!(pooling, [Api::Embeddings, Api::Rerank, Api::Classify]);
    }

    #[test]
    fn messages_is_anthropic_shaped() {
        let anthropic: Vec<Api> = Api::ALL.into_iter().filter(|a| a.is_anthropic()).collect();
        assert_eq!(anthropic, [Api::Messages]);
        assert!(!Api::Messages.is_openai() && Api::Messages.generates());
        assert_eq!(Api::from_path("/v1/messages"), Some(Api::Messages));
        assert_eq!(Api::from_path("/v1/messages/count_tokens"), None);
    }
}

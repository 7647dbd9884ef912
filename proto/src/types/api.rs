//! The generation APIs of the SGLang HTTP server that infera serves, routes and emulates: SGLang's
//! native `/generate` and its OpenAI-compatible routes (SGLang 0.5.23
//! python/sglang/srt/entrypoints/http_server.py). The proxy routes them, the tokenizer reads their
//! prompts, the emulated engine answers them; all three name them with [`Api`].

/// One generation API.
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
}

impl Api {
    /// Every API.
    pub const ALL: [Self; 4] = [Self::ChatCompletions, Self::Completions, Self::Generate, Self::Responses];

    /// The request path, on the proxy and on the workers alike.
    pub fn path(self) -> &'static str {
        match self {
            Self::ChatCompletions => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
            Self::Generate => "/generate",
            Self::Responses => "/v1/responses",
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
        }
    }

    /// Whether SGLang serves it with OpenAI's shapes (errors, `X-Data-Parallel-Rank`); `/generate`
    /// has SGLang's own.
    pub fn is_openai(self) -> bool {
        self != Self::Generate
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
}

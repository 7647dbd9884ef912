//! What a request asks SGLang to prefill, once read from its body: token ids, text, chat messages
//! for the template, or the reason the proxy does not tokenize it ([`Skip`]).

use serde_json::{Map, Value};

/// Why a request's prompt is not tokenized by the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Skip {
    /// Several prompts in one request (a batch): there is no one prefix to route on.
    Batch,
    /// Images, audio or video: the engine expands them into tokens the proxy cannot count.
    Media,
    /// `/v1/responses` with `previous_response_id`: the history is stored on the engine.
    StoredHistory,
    /// `input_embeds`: no token ids at all.
    Embeddings,
    /// A chat request, and the tokenizer has no chat template.
    NoChatTemplate,
    /// A feature whose prompt SGLang writes with code the proxy does not reproduce (custom
    /// tools and their calls, encrypted reasoning state in `/v1/responses`).
    Unsupported,
}

impl Skip {
    /// A metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Batch => "batch",
            Self::Media => "media",
            Self::StoredHistory => "stored_history",
            Self::Embeddings => "embeddings",
            Self::NoChatTemplate => "no_chat_template",
            Self::Unsupported => "unsupported",
        }
    }
}

/// What a request asks SGLang to prefill.
#[derive(Debug)]
pub(crate) enum Prompt {
    /// Token ids given by the client, passed through.
    Ids(Vec<u32>),
    /// Text SGLang encodes with `add_special_tokens=True`.
    Text(String),
    /// Chat messages for the template.
    Chat(Box<ChatInput>),
    /// Not tokenized.
    Skip(Skip),
}

/// The parts of a chat-shaped request the rendering depends on (OpenAI chat shape; a
/// `/v1/responses` request is converted to it first).
#[derive(Debug, Default)]
pub(crate) struct ChatInput {
    /// `messages`, as the client sent them.
    pub(crate) messages: Vec<Value>,
    /// `tools`, in the chat shape (`{"type": "function", "function": {…}}`).
    pub(crate) tools: Vec<Value>,
    /// `tool_choice` (`null` when absent).
    pub(crate) tool_choice: Value,
    /// `reasoning_effort`, passed to the template when set.
    pub(crate) reasoning_effort: Option<Value>,
    /// `chat_template_kwargs`.
    pub(crate) template_kwargs: Map<String, Value>,
    /// `continue_final_message`.
    pub(crate) continue_final_message: bool,
    /// Whether SGLang coalesces the system messages into one leading one when the template has
    /// no inline system support (the `/v1/responses` path).
    pub(crate) coalesces_system: bool,
}

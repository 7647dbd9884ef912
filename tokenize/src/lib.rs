//! infera-tokenize: a request → the token ids SGLang would prefill for it, so the proxy can route
//! on the prompt's page hashes and its exact input length.
//!
//! - [`Tokenizer::load`] reads a Hugging Face `tokenizer.json` (pure-Rust `tokenizers`) and the
//!   chat template next to it (`chat_template.jinja` or `tokenizer_config.json`) or given
//!   explicitly ([`ChatTemplateSource`]).
//! - [`Tokenizer::tokenize`] reads a `/v1/chat/completions`, `/v1/completions`, `/generate`,
//!   `/v1/responses` or `/v1/messages` body (named by `infera_proto::types::Api`) into a prompt
//!   (`request`, `responses`, `messages`, `prompt`), renders chat messages the way SGLang
//!   0.5.23 prepares them (`chat`) with a minijinja environment configured like transformers'
//!   (`template`, `python`), and encodes the text without adding special tokens again (chat)
//!   or with them (completions, `/generate` text); token ids in the request pass through.
//! - Some prompts are not predictable: [`Outcome::Ambiguous`] (a `/v1/responses` request whose
//!   rendering depends on whether SGLang coalesces its system messages) and
//!   [`Outcome::Skipped`] (batches, media, history stored on the engine) route on load.
//! - Multi-turn sessions reuse the ids of the previous turn up to a safe cut point
//!   (`boundary`, `session`); the result is the same as encoding the whole prompt.
//! - The ids are Hugging Face `tokenizers`' (SGLang's), computed by a faster BPE (`kitoken`)
//!   where that one agrees with `tokenizers` on a probe at load (`encoder`, `probe`).
//! - [`fixture`]: tokenizers and templates made at run time for tests and benchmarks.

mod boundary;
mod chat;
mod config;
mod encoder;
mod error;
mod fit;
pub mod fixture;
mod messages;
mod probe;
mod prompt;
mod python;
mod request;
mod responses;
mod session;
mod template;
mod token_bytes;
mod tokenizer;

pub use config::{ChatTemplateSource, SpecialTokens};
pub use encoder::{EncoderChoice, EncoderKind, ReferenceReason};
pub use error::{LoadError, TokenizeError};
pub use prompt::Skip;
pub use session::CacheStats;
pub use tokenizer::{Ambiguity, CacheUse, Outcome, Rendered, Tokenizer, Tokens, Verdict};

//! Errors: loading the files (the proxy refuses to start) and tokenizing one request (the
//! request routes on load, as it would without a tokenizer).

use std::path::PathBuf;

/// The tokenizer files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file cannot be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The path of the file that could not be used.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer.json` does not parse as a Hugging Face tokenizer.
    #[error("{path}: not a Hugging Face tokenizer.json: {reason}")]
    Tokenizer {
        /// The path of the file that could not be used.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// `tokenizer_config.json` is not valid JSON or has fields of the wrong shape.
    #[error("{path}: {reason}")]
    Config {
        /// The path of the file that could not be used.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The chat template does not compile.
    #[error("{origin}: the chat template does not compile: {reason}")]
    Template {
        /// Where the template came from (a file, or `tokenizer_config.json` with the template's name).
        origin: String,
        /// The compiler's message.
        reason: String,
    },
}

/// One request could not be turned into token ids.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// The request body has a field of a shape SGLang rejects too.
    #[error("request: {0}")]
    Request(String),
    /// The chat template raised or failed (SGLang answers such a request with 400).
    #[error("chat template: {0}")]
    Template(String),
    /// The tokenizer failed on the text.
    #[error("tokenizer: {0}")]
    Encode(String),
}

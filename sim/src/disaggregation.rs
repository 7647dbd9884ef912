//! The worker's role in prefill/decode (PD) disaggregation, `--disaggregation-mode`. It is its
//! own module because everything below the command line reads it too: the KV pool sizes a
//! decode differently ([`crate::kv_pool`]), rank choice checks a prefill's pinned rank
//! ([`crate::ranks`]), and a request's flow takes a different path per role ([`crate::flow`]).

use clap::ValueEnum;

/// `--disaggregation-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DisaggregationMode {
    /// Aggregated: prefill and decode in one engine.
    Null,
    /// PD prefill.
    Prefill,
    /// PD decode.
    Decode,
}

impl DisaggregationMode {
    /// The SGLang spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }
}

//! The run-time check of the fast encoder ([`Tokenizer::check`]): a prompt's ids, as the request
//! was routed with them, against the reference's whole encoding of the same prompt.
//!
//! Where they differ, the check finds which part was wrong. If the fast encoder's whole encoding
//! differs from the reference's, the fast encoder is off from then on. If it is right, the ids
//! came wrong out of the session cache (or the prompt rendered differently this time, as a
//! template reading the clock can). Either way the session cache's entries so far are not lent
//! out again, since they may hold wrong ids.

use std::sync::atomic::Ordering;

use infera_proto::types::Api;
use serde_json::{Map, Value};

use super::{Rendered, Tokenizer};
use crate::encoder::ReferenceReason;
use crate::error::TokenizeError;
use crate::probe;

/// What checking a prompt's ids against the reference encoder found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing was encoded (ids from the client, an ambiguous or skipped prompt).
    NotEncoded,
    /// The reference gives the same ids.
    Same,
    /// The fast encoder gives other ids than the reference: it is off from now on.
    EncoderDiffers(ReferenceReason),
    /// The fast encoder agrees with the reference but the ids the request had differ: the session
    /// cache lent wrong ids, or the prompt renders differently now. Its entries are dropped.
    CacheDiffers {
        /// The first token where they part.
        at: usize,
    },
}

impl Tokenizer {
    /// Checks the first prompt and then one in `every` against the reference
    /// ([`Tokenizer::check_due`]); 0: none.
    pub fn with_checks(mut self, every: u64) -> Self {
        self.check_every = every;
        self
    }

    /// Whether this prompt should be checked: the first one and then one in `every`, while the
    /// fast encoder runs.
    pub fn check_due(&self) -> bool {
        self.check_every > 0
            && self.encoder.is_fast()
            && self.checks_due.fetch_add(1, Ordering::Relaxed).is_multiple_of(self.check_every)
    }

    /// Encodes the prompt of `body` whole with the reference (no session cache) and compares it
    /// with `ids`, what [`Tokenizer::tokenize`] gave for it (see the module comment).
    pub fn check(&self, api: Api, body: &Map<String, Value>, ids: &[u32]) -> Result<Verdict, TokenizeError> {
        let Some(prompt) = self.whole_prompt(api, body)? else { return Ok(Verdict::NotEncoded) };
        let reference = self.ids_of(&prompt, |t, add| self.encoder.reference_encode(t, add))?;
        if reference == ids {
            return Ok(Verdict::Same);
        }
        // What the encoder in use gives for the whole prompt, without the session cache.
        let fast = self.ids_of(&prompt, |t, add| self.encoder.encode(t, add))?;
        self.cache_generation.fetch_add(1, Ordering::AcqRel);
        if fast != reference {
            let reason = ReferenceReason::RunTimeDiffers {
                at: first_difference(&fast, &reference),
                excerpt: probe::excerpt(prompt.text()),
            };
            return Ok(Verdict::EncoderDiffers(self.encoder.disagree(reason)));
        }
        Ok(Verdict::CacheDiffers { at: first_difference(ids, &reference) })
    }

    /// The prompt of `body` as text to encode, if it is one.
    fn whole_prompt(&self, api: Api, body: &Map<String, Value>) -> Result<Option<Rendered>, TokenizeError> {
        Ok(match self.render(api, body)? {
            r @ (Rendered::Text(_) | Rendered::Chat { .. }) => Some(r),
            Rendered::Ids(_) | Rendered::Ambiguous(_) | Rendered::Skipped(_) => None,
        })
    }

    /// A rendered prompt's ids, encoded whole by `encode`, as [`Tokenizer::tokenize`] puts them
    /// together.
    fn ids_of(
        &self,
        prompt: &Rendered,
        encode: impl Fn(&str, bool) -> Result<Vec<u32>, TokenizeError>,
    ) -> Result<Vec<u32>, TokenizeError> {
        match prompt {
            Rendered::Text(text) => encode(text, true),
            Rendered::Chat { text, assistant_prefix } => {
                let mut ids = encode(text, false)?;
                if let Some(prefix) = assistant_prefix {
                    ids.extend(self.assistant_prefix_ids(prefix, &encode)?);
                }
                Ok(ids)
            }
            Rendered::Ids(_) | Rendered::Ambiguous(_) | Rendered::Skipped(_) => Ok(Vec::new()),
        }
    }
}

impl Rendered {
    /// The text of a text or chat prompt.
    fn text(&self) -> &str {
        match self {
            Self::Text(text) | Self::Chat { text, .. } => text,
            Self::Ids(_) | Self::Ambiguous(_) | Self::Skipped(_) => "",
        }
    }
}

fn first_difference(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

//! [`Encoder`]: text → token ids exactly as Hugging Face `tokenizers` encodes them (the library
//! under SGLang's `AutoTokenizer`), on a faster BPE where that one is proven to agree.
//!
//! The reference is `tokenizers` itself. The fast encoder is `kitoken`, built from the same
//! `tokenizer.json` (as `tokenizers` serializes it back, so both read what `tokenizers`
//! understood). It takes 0.12–0.22× the reference's time on the tokenizers SGLang serves
//! (manual/features/kv_aware_routing.md). It is used only when, at load, the model is a BPE
//! kitoken runs as `tokenizers` does (`crate::fit`) and kitoken gives the reference's ids on
//! every text of a probe (`crate::probe`), with and without the post-processor's special tokens;
//! otherwise the reference encodes everything and [`EncoderKind::Reference`] says why. A run-time
//! check can still turn it off (`Tokenizer::check`).
//!
//! kitoken's `encode` is `tokenizers`' `encode(text, add_special_tokens=False)` (added tokens
//! extracted first, then normalize, pre-tokenize, BPE). The post-processor's tokens (a template's
//! `<bos>`, BERT's `[CLS]`…`[SEP]`) are found once by running the reference's post-processor on
//! a one-token sentinel, and put around the fast ids ([`Affixes`]).
//!
//! Offsets (for the session cache's cut points) come from the token bytes: when the ids' bytes,
//! laid end to end, are the text itself (byte-level BPE, as Llama 3, Qwen and DeepSeek, on a text
//! its normalizer leaves as it is), each token's span is where its bytes lie, exactly. Any other
//! text is encoded with offsets by the reference. A tokenizer whose bytes never tile plain text
//! (Metaspace's "▁", a prefix space) does not try.

use std::collections::HashSet;
use std::fmt;
use std::sync::OnceLock;

use crate::error::TokenizeError;
use crate::token_bytes::{TokenBytes, id_bound};
use crate::{fit, probe};

/// Which encoder a tokenizer asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EncoderChoice {
    /// The fast encoder where it agrees with the reference at load, else the reference.
    #[default]
    Auto,
    /// The reference (`tokenizers`) only.
    Reference,
    /// The fast encoder without the probe at load: for tests of the run-time check
    /// (`Tokenizer::check`) only; the proxy's flags do not offer it.
    FastWithoutProbe,
}

/// Which encoder a tokenizer uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncoderKind {
    /// kitoken (checked against the reference at load, unless asked for without the probe).
    Fast {
        /// Whether the session cache's offsets come from the token bytes (else from the
        /// reference).
        offsets_from_bytes: bool,
    },
    /// Hugging Face `tokenizers`, for this reason.
    Reference(ReferenceReason),
}

/// Why the reference encodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReferenceReason {
    /// The reference was asked for ([`EncoderChoice::Reference`]).
    AskedFor,
    /// The tokenizer encodes special tokens as text (`encode_special_tokens`).
    SpecialsAsText,
    /// kitoken cannot read or run this tokenizer as `tokenizers` does.
    Unsupported(String),
    /// kitoken's ids differed on a probe text at load.
    ProbeDiffers {
        /// The start of the text.
        excerpt: String,
    },
    /// A run-time check found other ids than the reference's.
    RunTimeDiffers {
        /// The first token where they part.
        at: usize,
        /// The start of the prompt.
        excerpt: String,
    },
}

impl fmt::Display for ReferenceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AskedFor => f.write_str("asked for"),
            Self::SpecialsAsText => {
                f.write_str("the tokenizer encodes special tokens as text (`encode_special_tokens`)")
            }
            Self::Unsupported(why) => {
                write!(f, "kitoken does not run this tokenizer as tokenizers does: {why}")
            }
            Self::ProbeDiffers { excerpt } => {
                write!(f, "kitoken's ids differ from tokenizers' on the probe text {excerpt:?}")
            }
            Self::RunTimeDiffers { at, excerpt } => {
                write!(
                    f,
                    "kitoken's ids differed from tokenizers' at run time, from token {at} of a prompt starting {excerpt:?}"
                )
            }
        }
    }
}

/// A text's ids, each with its byte span in the text.
pub(crate) struct WithOffsets {
    pub(crate) ids: Vec<u32>,
    pub(crate) offsets: Vec<(usize, usize)>,
}

/// The encoder of a tokenizer.
pub(crate) struct Encoder {
    reference: tokenizers::Tokenizer,
    fast: Option<Fast>,
    kind: EncoderKind,
    /// Set when a run-time check found the fast ids wrong: the reference encodes from then on.
    disagreed: OnceLock<ReferenceReason>,
}

struct Fast {
    bpe: kitoken::Kitoken,
    affixes: Affixes,
    /// Each id's bytes, when they tile the text (see the module comment).
    bytes: Option<TokenBytes>,
}

/// The ids the post-processor puts before and after the text's ids.
#[derive(Debug, Default, PartialEq, Eq)]
struct Affixes {
    before: Vec<u32>,
    after: Vec<u32>,
}

impl fmt::Debug for Encoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encoder").field("kind", &self.kind()).finish_non_exhaustive()
    }
}

impl Encoder {
    /// The encoder for `reference` (truncation and padding already off).
    pub(crate) fn new(reference: tokenizers::Tokenizer, choice: EncoderChoice) -> Self {
        let fast = match choice {
            EncoderChoice::Reference => Err(ReferenceReason::AskedFor),
            EncoderChoice::Auto => Fast::build(&reference, true),
            EncoderChoice::FastWithoutProbe => Fast::build(&reference, false),
        };
        let (fast, kind) = match fast {
            Ok(fast) => {
                let kind = EncoderKind::Fast { offsets_from_bytes: fast.bytes.is_some() };
                (Some(fast), kind)
            }
            Err(reason) => (None, EncoderKind::Reference(reason)),
        };
        Self { reference, fast, kind, disagreed: OnceLock::new() }
    }

    /// Which encoder runs.
    pub(crate) fn kind(&self) -> EncoderKind {
        match self.disagreed.get() {
            Some(reason) => EncoderKind::Reference(reason.clone()),
            None => self.kind.clone(),
        }
    }

    /// The fast encoder, unless a run-time check turned it off.
    fn fast(&self) -> Option<&Fast> {
        self.fast.as_ref().filter(|_| self.disagreed.get().is_none())
    }

    /// Whether the fast encoder is running (and so worth checking).
    pub(crate) fn is_fast(&self) -> bool {
        self.fast().is_some()
    }

    /// The Hugging Face tokenizer.
    pub(crate) fn reference(&self) -> &tokenizers::Tokenizer {
        &self.reference
    }

    /// The Hugging Face tokenizer, to build another encoder on.
    pub(crate) fn into_reference(self) -> tokenizers::Tokenizer {
        self.reference
    }

    /// `tokenizer.encode(text, add_special_tokens=…)`'s ids.
    pub(crate) fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizeError> {
        // A text kitoken cannot encode (no token for a part) goes to the reference.
        match self.fast().map(|fast| fast.encode(text, add_special_tokens)) {
            Some(Ok(ids)) => Ok(ids),
            _ => reference_ids(&self.reference, text, add_special_tokens),
        }
    }

    /// The reference's ids for `text`.
    pub(crate) fn reference_encode(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, TokenizeError> {
        reference_ids(&self.reference, text, add_special_tokens)
    }

    /// A run-time check found ids the reference does not give: the reference encodes from now
    /// on. Returns the reason kept (the first one, when checks race).
    pub(crate) fn disagree(&self, reason: ReferenceReason) -> ReferenceReason {
        self.disagreed.get_or_init(|| reason).clone()
    }

    /// The ids of `text` (no special tokens added) with each one's byte span in `text`.
    pub(crate) fn encode_with_offsets(&self, text: &str) -> Result<WithOffsets, TokenizeError> {
        if let Some(Fast { bpe, bytes: Some(bytes), .. }) = self.fast()
            && let Ok(ids) = bpe.encode(text, true)
            && let Some(offsets) = bytes.offsets(text, &ids)
        {
            return Ok(WithOffsets { ids, offsets });
        }
        let encoding =
            self.reference.encode(text, false).map_err(|e| TokenizeError::Encode(e.to_string()))?;
        Ok(WithOffsets { ids: encoding.get_ids().to_vec(), offsets: encoding.get_offsets().to_vec() })
    }
}

fn reference_ids(
    reference: &tokenizers::Tokenizer,
    text: &str,
    add_special_tokens: bool,
) -> Result<Vec<u32>, TokenizeError> {
    let encoding =
        reference.encode_fast(text, add_special_tokens).map_err(|e| TokenizeError::Encode(e.to_string()))?;
    Ok(encoding.get_ids().to_vec())
}

impl Fast {
    /// kitoken for `reference`, if it fits and (when `probed`) agrees with it on the probe.
    fn build(reference: &tokenizers::Tokenizer, probed: bool) -> Result<Self, ReferenceReason> {
        let unsupported = |why: String| ReferenceReason::Unsupported(why);
        if reference.get_encode_special_tokens() {
            return Err(ReferenceReason::SpecialsAsText);
        }
        let json =
            reference.to_string(false).map_err(|e| unsupported(format!("cannot serialize it: {e}")))?;
        let parsed: serde_json::Value =
            serde_json::from_str(&json).map_err(|e| unsupported(e.to_string()))?;
        fit::check(reference, &parsed).map_err(unsupported)?;
        let mut definition = kitoken::Definition::from_tokenizers_slice(json.as_bytes())
            .map_err(|e| unsupported(format!("kitoken cannot read it: {e}")))?;
        // As the reference: no truncation or padding (transformers' `encode` without them).
        definition
            .config
            .processing
            .retain(|p| !matches!(p, kitoken::Processing::Pad { .. } | kitoken::Processing::Truncate { .. }));
        let bpe = kitoken::Kitoken::from_definition(definition)
            .map_err(|e| unsupported(format!("kitoken cannot build it: {e}")))?;
        let affixes = Affixes::of(reference).map_err(unsupported)?;
        let mut fast = Self { bpe, affixes, bytes: None };
        let texts = if probed { probe::texts(reference) } else { Vec::new() };
        // Each probe text's plain encoding, with offsets, is kept for the offsets check below.
        let mut plain = Vec::with_capacity(texts.len());
        for text in &texts {
            let encoding = reference.encode(text.as_str(), false).map_err(|e| unsupported(e.to_string()))?;
            let with_specials =
                reference_ids(reference, text, true).map_err(|e| unsupported(e.to_string()))?;
            if fast.encode(text, false).ok().as_deref() != Some(encoding.get_ids())
                || fast.encode(text, true).ok() != Some(with_specials)
            {
                return Err(ReferenceReason::ProbeDiffers { excerpt: probe::excerpt(text) });
            }
            plain.push(encoding);
        }
        let added: HashSet<u32> = reference.get_added_tokens_decoder().into_keys().collect();
        // Kept if the bytes tile plain text (they never do under a Metaspace or a prefix
        // space), and give the reference's spans wherever they tile a probe text.
        fast.bytes = TokenBytes::of(&fast.bpe, reference, id_bound(reference)).filter(|bytes| {
            let tiles = |text: &str| {
                reference.encode(text, false).ok().and_then(|e| bytes.offsets(text, e.get_ids()))
            };
            probe::PLAIN.iter().all(|text| tiles(text).is_some())
                && texts.iter().zip(&plain).all(|(text, encoding)| {
                    let ids = encoding.get_ids();
                    bytes
                        .offsets(text, ids)
                        .is_none_or(|o| added_spans_agree(&added, ids, &o, encoding.get_offsets()))
                })
        });
        Ok(fast)
    }

    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizeError> {
        let ids = self.bpe.encode(text, true).map_err(|e| TokenizeError::Encode(e.to_string()))?;
        if !add_special_tokens || self.affixes == Affixes::default() {
            return Ok(ids);
        }
        let mut all = Vec::with_capacity(self.affixes.before.len() + ids.len() + self.affixes.after.len());
        all.extend_from_slice(&self.affixes.before);
        all.extend(ids);
        all.extend_from_slice(&self.affixes.after);
        Ok(all)
    }
}

/// The byte spans from the token bytes are the reference's offsets for every added token (the
/// only tokens the session cache cuts at). Other tokens may differ by design: the reference gives
/// a token inside a multi-byte character the whole character's span, and trims a word's leading
/// space from its offsets (`trim_offsets`).
fn added_spans_agree(
    added: &HashSet<u32>,
    ids: &[u32],
    ours: &[(usize, usize)],
    theirs: &[(usize, usize)],
) -> bool {
    ours.len() == theirs.len()
        && ids.iter().zip(ours.iter().zip(theirs)).all(|(id, (a, b))| !added.contains(id) || a == b)
}

impl Affixes {
    /// What the reference's post-processor puts around one sequence: it runs on a one-token
    /// sentinel, and what lands before and after the sentinel is the affixes.
    fn of(reference: &tokenizers::Tokenizer) -> Result<Self, String> {
        const SENTINEL: u32 = u32::MAX;
        let one = tokenizers::Encoding::from_tokens(
            vec![tokenizers::Token::new(SENTINEL, String::new(), (0, 0))],
            0,
        );
        let processed = reference.post_process(one, None, true).map_err(|e| e.to_string())?;
        let ids = processed.get_ids();
        match ids.iter().position(|&id| id == SENTINEL) {
            Some(at) if ids.iter().filter(|&&id| id == SENTINEL).count() == 1 => {
                Ok(Self { before: ids[..at].to_vec(), after: ids[at + 1..].to_vec() })
            }
            _ => Err("the post-processor does not keep the sequence's ids as they are".into()),
        }
    }
}

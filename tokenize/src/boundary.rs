//! Safe cut points: where a prompt's token ids may be split so that the ids of the text before
//! the cut (taken from an earlier, longer-or-equal encoding) followed by the encoding of the text
//! from the cut on equal the encoding of the whole text.
//!
//! Hugging Face tokenizers first extract the added tokens from the raw text (leftmost-longest
//! match over all added tokens), then normalize, pre-tokenize and run the model on each piece
//! between them independently; BPE never merges across pieces. So a cut placed *at the start*
//! of an added-token match is exact when the match is the same in both texts and nothing
//! crosses it:
//!
//! - the token is matched on raw text (`normalized: false`), does not take whitespace from its
//!   left (`lstrip: false`), does not depend on the next character (`single_word: false`),
//!   does not begin with whitespace, and is still extracted (not a special token while
//!   `encode_special_tokens` is set);
//! - no other added token contains it or can start before it and end inside it (SGLang's own
//!   test for its parallel prompt encoding, `parallel_prompt_encode._cuts_at`);
//! - the text is identical up to the *end* of the token in both prompts, so the match there is
//!   the same one.
//!
//! Cutting before the token (rather than after it) keeps the text after the cut from starting a
//! sequence: the suffix begins with the added token, so a Metaspace pre-tokenizer with
//! `prepend_scheme: first` (which treats the piece at offset 0 specially) sees the same pieces
//! at non-zero offsets as in the whole text. Truncation and padding are turned off at load
//! (transformers does the same for an `encode` call without them).

use std::collections::HashMap;

use tokenizers::Tokenizer;

/// A place a prompt may be cut: before token `index`, which starts at byte `start` and ends at
/// byte `end` of the prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cut {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) index: usize,
}

/// The added tokens a prompt may be cut before.
#[derive(Debug, Default)]
pub(crate) struct Boundaries {
    /// id → the token's text.
    tokens: HashMap<u32, String>,
}

impl Boundaries {
    /// The tokenizer's safe added tokens.
    pub(crate) fn of(tokenizer: &Tokenizer) -> Self {
        let added = tokenizer.get_added_tokens_decoder();
        let all: Vec<&str> = added.values().map(|t| t.content.as_str()).filter(|c| !c.is_empty()).collect();
        let split_specials = tokenizer.get_encode_special_tokens();
        let tokens = added
            .iter()
            .filter(|(_, t)| {
                let position_free = !(t.normalized || t.lstrip || t.single_word);
                let extracted = !(t.special && split_specials);
                let starts_with_text = t.content.chars().next().is_some_and(|c| !c.is_whitespace());
                position_free && extracted && starts_with_text && cuts_cleanly(&t.content, &all)
            })
            .map(|(&id, t)| (id, t.content.clone()))
            .collect();
        Self { tokens }
    }

    /// Whether any cut is possible.
    pub(crate) fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The cuts of an encoding of `text` (`offsets` in bytes of `text`), shifted by `base` bytes
    /// and `first` tokens.
    pub(crate) fn cuts(
        &self,
        text: &str,
        ids: &[u32],
        offsets: &[(usize, usize)],
        base: usize,
        first: usize,
    ) -> Vec<Cut> {
        ids.iter()
            .zip(offsets)
            .enumerate()
            .filter_map(|(i, (id, &(start, _)))| {
                let content = self.tokens.get(id)?;
                let end = start + content.len();
                // The id came from the added token itself (not a model token of the same id).
                (text.get(start..end) == Some(content.as_str())).then_some(Cut {
                    start: base + start,
                    end: base + end,
                    index: first + i,
                })
            })
            .collect()
    }
}

/// SGLang's `_cuts_at`: no other added token contains `token`, and none can begin in the text
/// before it and end inside it (a proper suffix of the other equal to a prefix of `token`).
fn cuts_cleanly(token: &str, all: &[&str]) -> bool {
    let prefixes: Vec<&str> = token.char_indices().skip(1).map(|(i, _)| &token[..i]).chain([token]).collect();
    !all.iter().any(|&other| {
        if other == token {
            return false;
        }
        if other.contains(token) {
            return true;
        }
        let tail = other.char_indices().nth(1).map_or("", |(i, _)| &other[i..]);
        prefixes.iter().any(|p| tail.ends_with(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_added_tokens_are_not_cut_points() {
        let all = ["<|im_start|>", "<|im_end|>", "x<|a|>", "<|a|>", "ab<|b", "<|b|>"];
        assert!(cuts_cleanly("<|im_start|>", &all));
        assert!(cuts_cleanly("<|im_end|>", &all));
        // Contained in another token.
        assert!(!cuts_cleanly("<|a|>", &all));
        // Another token can start before it and end inside it.
        assert!(!cuts_cleanly("<|b|>", &all));
    }
}

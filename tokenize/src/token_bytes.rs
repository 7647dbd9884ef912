//! [`TokenBytes`]: every id's bytes, so that an encoding's byte spans can be read off its ids
//! when the bytes, laid end to end, are the text (the fast encoder gives no offsets; the session
//! cache needs them at its cut points, `crate::boundary`).

/// Every id's bytes, one arena.
pub(crate) struct TokenBytes {
    /// Id `i`'s bytes are `arena[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    arena: Vec<u8>,
}

impl TokenBytes {
    /// Every id's bytes as kitoken decodes it alone, for ids `0..size`; `None` if one does not
    /// decode. An id with no token (a gap) gets no bytes, and no encoding has it.
    pub(crate) fn of(bpe: &kitoken::Kitoken, reference: &tokenizers::Tokenizer, size: u32) -> Option<Self> {
        let mut starts = Vec::with_capacity(size as usize + 1);
        let mut arena = Vec::new();
        for id in 0..size {
            starts.push(u32::try_from(arena.len()).ok()?);
            if reference.id_to_token(id).is_some() {
                arena.extend(bpe.decode([id], true).ok()?);
            }
        }
        starts.push(u32::try_from(arena.len()).ok()?);
        Some(Self { starts, arena })
    }

    /// Each id's byte span, if the ids' bytes laid end to end are `text`.
    pub(crate) fn offsets(&self, text: &str, ids: &[u32]) -> Option<Vec<(usize, usize)>> {
        let text = text.as_bytes();
        let mut offsets = Vec::with_capacity(ids.len());
        let mut at = 0;
        for &id in ids {
            let i = id as usize;
            let (start, end) = (*self.starts.get(i)? as usize, *self.starts.get(i + 1)? as usize);
            let piece = &self.arena[start..end];
            if piece.is_empty() || text.get(at..at + piece.len()) != Some(piece) {
                return None;
            }
            offsets.push((at, at + piece.len()));
            at += piece.len();
        }
        (at == text.len()).then_some(offsets)
    }
}

/// One past the largest id, added tokens included (`get_vocab_size` counts distinct strings,
/// which is less when ids have gaps).
pub(crate) fn id_bound(reference: &tokenizers::Tokenizer) -> u32 {
    reference.get_vocab(true).values().max().map_or(0, |&max| max.saturating_add(1))
}

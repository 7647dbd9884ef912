//! The frames of a live message and of a replay reply, checked before anything is decoded.

use bytes::Bytes;

/// A message whose frames are not SGLang's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not `[topic, seq, payload]` (live) or `[b"", (topic,) seq, payload]` (replay).
    #[error("{0} frames, expected {1}")]
    FrameCount(usize, &'static str),
    /// The sequence frame is not 8 bytes.
    #[error("sequence frame of {0} bytes, expected 8")]
    SeqLength(usize),
    /// A replay reply without the empty delimiter frame.
    #[error("replay reply without the empty delimiter frame")]
    Delimiter,
}

/// `seq` as SGLang writes it: 8 bytes, big-endian.
fn seq(frame: &[u8]) -> Result<[u8; 8], FrameError> {
    <[u8; 8]>::try_from(frame).map_err(|_| FrameError::SeqLength(frame.len()))
}

/// A live message `[topic, seq, payload]`: `Ok(None)` when the topic is another one.
pub(crate) fn live(frames: &[Bytes], topic: &[u8]) -> Result<Option<(u64, Bytes)>, FrameError> {
    let [t, s, payload] = frames else {
        return Err(FrameError::FrameCount(frames.len(), "3: [topic, seq, payload]"));
    };
    if t.as_ref() != topic {
        return Ok(None);
    }
    Ok(Some((u64::from_be_bytes(seq(s)?), payload.clone())))
}

/// One replay reply.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// A buffered batch.
    Batch(u64, Bytes),
    /// The end marker (`seq = -1`).
    End,
}

/// A replay reply as a DEALER receives it: `[b"", seq, payload]` (SGLang ≤ 0.5.21) or
/// `[b"", topic, seq, payload]` (≥ 0.5.22).
pub(super) fn reply(frames: &[Bytes]) -> Result<Reply, FrameError> {
    let (delimiter, s, payload) = match frames {
        [d, s, p] | [d, _, s, p] => (d, s, p),
        other => return Err(FrameError::FrameCount(other.len(), "3 or 4: [b\"\", (topic,) seq, payload]")),
    };
    if !delimiter.is_empty() {
        return Err(FrameError::Delimiter);
    }
    let s = seq(s)?;
    if s == [0xff; 8] {
        return Ok(Reply::End);
    }
    Ok(Reply::Batch(u64::from_be_bytes(s), payload.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &[u8]) -> Bytes {
        Bytes::copy_from_slice(s)
    }

    #[test]
    fn live_frames() {
        let seq7 = 7u64.to_be_bytes();
        assert_eq!(live(&[b(b"kv"), b(&seq7), b(b"p")], b"kv"), Ok(Some((7, b(b"p")))));
        assert_eq!(live(&[b(b"kv2"), b(&seq7), b(b"p")], b"kv"), Ok(None));
        assert_eq!(
            live(&[b(b"kv"), b(&seq7)], b"kv"),
            Err(FrameError::FrameCount(2, "3: [topic, seq, payload]"))
        );
        assert_eq!(live(&[b(b""), b(&[1, 2]), b(b"p")], b""), Err(FrameError::SeqLength(2)));
    }

    #[test]
    fn replay_frames_in_both_formats() {
        let seq3 = 3u64.to_be_bytes();
        assert_eq!(reply(&[b(b""), b(&seq3), b(b"p")]), Ok(Reply::Batch(3, b(b"p"))));
        assert_eq!(reply(&[b(b""), b(b"kv"), b(&seq3), b(b"p")]), Ok(Reply::Batch(3, b(b"p"))));
        assert_eq!(reply(&[b(b""), b(&[0xff; 8]), b(b"")]), Ok(Reply::End));
        assert_eq!(reply(&[b(b""), b(b""), b(&[0xff; 8]), b(b"")]), Ok(Reply::End));
        assert_eq!(reply(&[b(b"x"), b(&seq3), b(b"p")]), Err(FrameError::Delimiter));
        assert!(matches!(reply(&[b(b"")]), Err(FrameError::FrameCount(1, _))));
    }
}

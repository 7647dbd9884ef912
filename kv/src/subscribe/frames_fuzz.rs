//! Live and replay frames over arbitrary frame lists: the frame error the shape calls for, never
//! a panic, and well-formed messages give back their sequence and payload.

use bytes::Bytes;
use proptest::prelude::*;

use super::frames::{FrameError, Reply, live, reply};

fn frame() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        Just(Bytes::new()),
        Just(Bytes::from_static(b"kv")),
        Just(Bytes::from_static(&[0xff; 8])),
        any::<u64>().prop_map(|s| Bytes::copy_from_slice(&s.to_be_bytes())),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Bytes::from),
    ]
}

fn frames() -> impl Strategy<Value = Vec<Bytes>> {
    prop::collection::vec(frame(), 0..6)
}

fn seq(frame: &Bytes) -> Result<u64, FrameError> {
    <[u8; 8]>::try_from(frame.as_ref())
        .map(u64::from_be_bytes)
        .map_err(|_| FrameError::SeqLength(frame.len()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn live_frames_are_read_or_refused_by_shape(frames in frames(), topic in frame()) {
        let want = match frames.as_slice() {
            [t, s, p] if *t == topic => seq(s).map(|s| Some((s, p.clone()))),
            [_, _, _] => Ok(None),
            other => Err(FrameError::FrameCount(other.len(), "3: [topic, seq, payload]")),
        };
        prop_assert_eq!(live(&frames, &topic), want);
    }

    #[test]
    fn replay_frames_are_read_or_refused_by_shape(frames in frames()) {
        let want = match frames.as_slice() {
            [d, s, p] | [d, _, s, p] if d.is_empty() => match seq(s) {
                Ok(u64::MAX) => Ok(Reply::End),
                Ok(n) => Ok(Reply::Batch(n, p.clone())),
                Err(e) => Err(e),
            },
            [_, _, _] | [_, _, _, _] => Err(FrameError::Delimiter),
            other => Err(FrameError::FrameCount(other.len(), "3 or 4: [b\"\", (topic,) seq, payload]")),
        };
        prop_assert_eq!(reply(&frames), want);
    }

    #[test]
    fn well_formed_messages_round_trip(
        topic in frame(), n in 0..u64::MAX, payload in frame(), with_topic in any::<bool>(),
    ) {
        let s = Bytes::copy_from_slice(&n.to_be_bytes());
        let message = [topic.clone(), s.clone(), payload.clone()];
        prop_assert_eq!(live(&message, &topic), Ok(Some((n, payload.clone()))));
        let mut replayed = vec![Bytes::new(), s, payload.clone()];
        if with_topic {
            replayed.insert(1, topic);
        }
        prop_assert_eq!(reply(&replayed), Ok(Reply::Batch(n, payload)));
    }
}

//! Sequence tracking for one rank, pure: where a live `seq` stands against the one expected, and
//! which replayed batches fill a gap.

use bytes::Bytes;

/// Where a live message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arrival {
    /// The one expected (or seq 0 as the very first).
    InOrder,
    /// Batches `from..seq` were missed (the first message of a late join has `from == 0`).
    Gap {
        /// The first one missed.
        from: u64,
    },
    /// Below the one expected: the publisher restarted and counts from 0 again.
    Restarted {
        /// What was expected.
        expected: u64,
    },
}

/// The next sequence number expected, if any message has been seen.
#[derive(Debug, Default)]
pub(super) struct Sequencer {
    next: Option<u64>,
}

impl Sequencer {
    /// Classifies live `seq`.
    pub(super) fn arrival(&self, seq: u64) -> Arrival {
        match self.next {
            None if seq == 0 => Arrival::InOrder,
            None => Arrival::Gap { from: 0 },
            Some(next) if seq == next => Arrival::InOrder,
            Some(next) if seq > next => Arrival::Gap { from: next },
            Some(next) => Arrival::Restarted { expected: next },
        }
    }

    /// The next seq expected, once any message has been handled.
    pub(super) fn next(&self) -> Option<u64> {
        self.next
    }

    /// `seq` has been handled; the next one is expected.
    pub(super) fn handled(&mut self, seq: u64) {
        self.next = Some(seq.saturating_add(1));
    }

    /// Forgets the position (after a publisher restart): the next message starts afresh.
    pub(super) fn forget(&mut self) {
        self.next = None;
    }
}

/// What replay yielded for a gap `from..to`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Fill {
    /// Whether every batch of the gap came back.
    pub(super) complete: bool,
    /// The first replayed seq inside the gap, if any.
    pub(super) first: Option<u64>,
    /// What to deliver, in order: the whole gap, or (incomplete) the run of batches that ends
    /// right before `to` — what follows a hole is still consistent after a reset.
    pub(super) batches: Vec<(u64, Bytes)>,
}

/// Picks the replayed batches that fill `from..to`.
pub(super) fn fill(from: u64, to: u64, mut replayed: Vec<(u64, Bytes)>) -> Fill {
    replayed.retain(|(seq, _)| (from..to).contains(seq));
    replayed.sort_by_key(|(seq, _)| *seq);
    replayed.dedup_by_key(|(seq, _)| *seq);
    let first = replayed.first().map(|(seq, _)| *seq);
    if replayed.len() as u64 == to.saturating_sub(from) {
        return Fill { complete: true, first, batches: replayed };
    }
    // The longest run ending at `to - 1`.
    let mut keep = 0;
    for (i, (seq, _)) in replayed.iter().rev().enumerate() {
        if *seq + 1 + i as u64 != to {
            break;
        }
        keep = i + 1;
    }
    let batches = replayed.split_off(replayed.len() - keep);
    Fill { complete: false, first, batches }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals() {
        let mut s = Sequencer::default();
        assert_eq!(s.arrival(0), Arrival::InOrder);
        assert_eq!(s.arrival(5), Arrival::Gap { from: 0 }, "late join");
        s.handled(5);
        assert_eq!(s.arrival(6), Arrival::InOrder);
        assert_eq!(s.arrival(9), Arrival::Gap { from: 6 });
        assert_eq!(s.arrival(2), Arrival::Restarted { expected: 6 });
        s.forget();
        assert_eq!(s.arrival(0), Arrival::InOrder);
    }

    fn seqs(f: &Fill) -> Vec<u64> {
        f.batches.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn fills() {
        let got = |v: &[u64]| v.iter().map(|&s| (s, Bytes::new())).collect::<Vec<_>>();
        let f = fill(3, 6, got(&[6, 4, 3, 5, 2, 4]));
        assert!(f.complete);
        assert_eq!(seqs(&f), [3, 4, 5]);
        let f = fill(0, 6, got(&[2, 4, 5]));
        assert!(!f.complete);
        assert_eq!((f.first, seqs(&f)), (Some(2), vec![4, 5]));
        let f = fill(0, 6, got(&[1, 2, 3]));
        assert_eq!((f.complete, seqs(&f)), (false, vec![]));
        let f = fill(0, 6, vec![]);
        assert_eq!((f.complete, f.first), (false, None));
    }
}

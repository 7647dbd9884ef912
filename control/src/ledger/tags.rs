//! The tag of every lease and reservation id: a keyed SHA-256 of the id's kind, epoch and
//! sequence under a key drawn from the OS when the control process starts. Epochs and sequences
//! are easy to guess (sequences count from 1; an HA term is an etcd revision); the tag is not, so
//! a caller can name only the ids it was given. It is checked without keeping anything: an id
//! with a wrong tag is one this process never issued, released or not.

use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

/// The key the tags of one control process are made with.
#[derive(Clone)]
pub struct IdTags {
    key: [u8; 32],
}

impl std::fmt::Debug for IdTags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdTags(…)")
    }
}

/// Which kind of id a tag is for: a lease's tag never passes as a reservation's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    /// `l-…`.
    Lease,
    /// `r-…`.
    Reservation,
}

impl IdTags {
    /// A key from the operating system's generator.
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        rand::rngs::StdRng::from_os_rng().fill(&mut key);
        Self { key }
    }

    /// A given key (tests).
    pub fn fixed(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// The tag of the id of `kind` with `epoch` and `seq`: never 0 (0 means "no tag").
    pub fn tag(&self, kind: IdKind, epoch: u32, seq: u64) -> u64 {
        let mut hash = Sha256::new();
        hash.update(self.key);
        hash.update([match kind {
            IdKind::Lease => b'l',
            IdKind::Reservation => b'r',
        }]);
        hash.update(epoch.to_be_bytes());
        hash.update(seq.to_be_bytes());
        let digest = hash.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_depend_on_the_key_the_kind_and_the_id() {
        let (a, b) = (IdTags::fixed([1; 32]), IdTags::fixed([2; 32]));
        let t = a.tag(IdKind::Lease, 7, 1);
        assert_eq!(t, a.tag(IdKind::Lease, 7, 1), "the same id, the same tag");
        assert_ne!(t, b.tag(IdKind::Lease, 7, 1), "another process's key");
        assert_ne!(t, a.tag(IdKind::Reservation, 7, 1), "a reservation's tag is not a lease's");
        assert_ne!(t, a.tag(IdKind::Lease, 7, 2));
        assert_ne!(t, a.tag(IdKind::Lease, 8, 1));
        assert_ne!(IdTags::random().tag(IdKind::Lease, 7, 1), IdTags::random().tag(IdKind::Lease, 7, 1));
        assert_ne!(t, 0);
    }
}

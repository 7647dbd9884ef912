//! Identifier newtypes. Ids that control hands out carry the control instance's epoch, so an id
//! from before a control restart can never name a reservation or lease of the new instance, and
//! a tag (64 bits no caller can guess: manual/operations/security.md), so that knowing how ids
//! are numbered is not enough to name someone else's lease or reservation.

use std::{fmt, str::FromStr, sync::Arc};

use serde::{Deserialize, Serialize};

macro_rules! name_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps a name; callers at the wire boundary reject empty ones first.
            pub fn new(name: impl Into<Arc<str>>) -> Self {
                Self(name.into())
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // Hashes and compares as its text, so maps keyed by the id are looked up by `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }
    };
}

name_newtype!(
    /// A worker's id, unique in the deployment (the etcd key's last segment).
    WorkerId
);
name_newtype!(
    /// A served model name, as clients send it in `model`.
    ModelName
);
name_newtype!(
    /// The request id carried across both PD legs (`x-request-id`).
    RequestId
);
name_newtype!(
    /// A multi-turn session key (prefill affinity).
    SessionKey
);
name_newtype!(
    /// A service class's name (`x-infera-service-class`; control's `--service-classes`).
    ServiceClassName
);
impl ServiceClassName {
    /// Whether `name` can name a service class: 1–64 of `[A-Za-z0-9._-]` (a label value of the
    /// metrics, a header value).
    pub fn is_valid(name: &str) -> bool {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        !name.is_empty() && name.len() <= 64 && name.chars().all(ok)
    }
}
name_newtype!(
    /// A tenant: whose share of the admission queue a request uses (its API key's name).
    TenantId
);

/// An attention-DP rank inside one worker.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DpRank(pub u32);

impl fmt::Display for DpRank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A routable unit: one worker and one of its DP ranks. Displayed as `worker/rank`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Target {
    /// The worker whose rank this is.
    pub worker: WorkerId,
    /// Its rank.
    pub rank: DpRank,
}

impl Target {
    /// Builds a target from its parts.
    pub fn new(worker: WorkerId, rank: DpRank) -> Self {
        Self { worker, rank }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.worker, self.rank)
    }
}

/// An id that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {kind} id {text:?} (expected {kind_prefix}-<epoch hex>-<sequence>-<tag hex>)")]
pub struct IdParseError {
    kind: &'static str,
    kind_prefix: &'static str,
    text: String,
}

macro_rules! epoch_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        pub struct $name {
            /// The control instance that issued the id.
            pub epoch: u32,
            /// Issue order inside that instance, from 1.
            pub seq: u64,
            /// The issuer's unguessable check of `epoch` and `seq` (16 hex digits on the wire);
            /// 0 for an id without one (a control older than tags), which a control that tags
            /// its ids knows as no id of its own.
            pub tag: u64,
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "-{:08x}-{}"), self.epoch, self.seq)?;
                if self.tag != 0 {
                    write!(f, "-{:016x}", self.tag)?;
                }
                Ok(())
            }
        }

        impl FromStr for $name {
            type Err = IdParseError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let err = || IdParseError { kind: $kind, kind_prefix: $prefix, text: s.to_owned() };
                let rest = s.strip_prefix(concat!($prefix, "-")).ok_or_else(err)?;
                let (epoch, rest) = rest.split_once('-').ok_or_else(err)?;
                let (seq, tag) = match rest.split_once('-') {
                    Some((seq, tag)) => (seq, Some(tag)),
                    None => (rest, None),
                };
                // Digits only: `from_str_radix` and `parse` would also take a leading `+`.
                let hex = |t: &str, len: usize| t.len() == len && t.bytes().all(|b| b.is_ascii_hexdigit());
                if !hex(epoch, 8)
                    || seq.is_empty()
                    || !seq.bytes().all(|b| b.is_ascii_digit())
                    || tag.is_some_and(|t| !hex(t, 16))
                {
                    return Err(err());
                }
                let epoch = u32::from_str_radix(epoch, 16).map_err(|_| err())?;
                let seq: u64 = seq.parse().map_err(|_| err())?;
                // A written tag is never 0: 0 stands for "no tag".
                let tag = match tag {
                    Some(t) => u64::from_str_radix(t, 16).ok().filter(|t| *t != 0).ok_or_else(err)?,
                    None => 0,
                };
                if seq == 0 {
                    return Err(err());
                }
                Ok(Self { epoch, seq, tag })
            }
        }
    };
}

epoch_id!(
    /// A booked reservation, `r-<epoch>-<seq>-<tag>`.
    ReservationId, "r", "reservation"
);
epoch_id!(
    /// A proxy's lease, `l-<epoch>-<seq>-<tag>`.
    LeaseId, "l", "lease"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_ids_round_trip_through_text() {
        let id = ReservationId { epoch: 0xdead_beef, seq: 42, tag: 0x0123_4567_89ab_cdef };
        assert_eq!(id.to_string(), "r-deadbeef-42-0123456789abcdef");
        assert_eq!("r-deadbeef-42-0123456789abcdef".parse::<ReservationId>(), Ok(id));
        // An id of a control older than tags round-trips as it came.
        let old = ReservationId { epoch: 0xdead_beef, seq: 42, tag: 0 };
        assert_eq!(old.to_string(), "r-deadbeef-42");
        assert_eq!("r-deadbeef-42".parse::<ReservationId>(), Ok(old));
    }

    #[test]
    fn malformed_ids_are_rejected() {
        for bad in [
            "",
            "r-",
            "r-deadbeef",
            "r-deadbeef-",
            "r-deadbeef-0",
            "l-deadbeef-1",
            "r-xyz-1",
            "r-1-1",
            "r-deadbeef-1-",
            "r-deadbeef-1-0123",
            "r-deadbeef-1-0123456789abcdeg",
            "r-deadbeef-1-0000000000000000",
            "r-deadbeef-1-0123456789abcdef-1",
            "r-deadbeef--0123456789abcdef",
        ] {
            assert!(bad.parse::<ReservationId>().is_err(), "{bad:?} parsed");
        }
        assert!("r-00000001-1".parse::<LeaseId>().is_err());
        assert!(
            "r-+eadbeef-1".parse::<ReservationId>().is_err()
                && "r-deadbeef-+1".parse::<ReservationId>().is_err()
        );
    }

    #[test]
    fn targets_display_as_worker_slash_rank() {
        let t = Target::new(WorkerId::new("decode-0"), DpRank(3));
        assert_eq!(t.to_string(), "decode-0/3");
    }
}

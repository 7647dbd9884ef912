//! What can be wrong with a payload, and where.

use std::fmt;

/// Where in a batch a problem was found: the event (by position) and the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// The event's position in the batch, `None` for the batch's own fields.
    pub event: Option<usize>,
    /// The field (`"ts"`, `"block_hashes"`, `"type"`, …).
    pub field: &'static str,
}

impl Location {
    /// A field of the batch itself.
    pub const fn batch(field: &'static str) -> Self {
        Self { event: None, field }
    }

    /// A field of event `event`.
    pub const fn event(event: usize, field: &'static str) -> Self {
        Self { event: Some(event), field }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.event {
            Some(i) => write!(f, "event {i} `{}`", self.field),
            None => write!(f, "batch `{}`", self.field),
        }
    }
}

/// A payload that is not a KV-event batch SGLang could have sent, or one past our caps.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WireError {
    /// The payload ends inside a value.
    #[error("truncated payload: {needed} more byte(s) needed at offset {offset}")]
    Truncated {
        /// Byte offset where more input was needed.
        offset: usize,
        /// How many more bytes the value needed.
        needed: usize,
    },
    /// A value of the wrong msgpack type.
    #[error("{at}: expected {expected}, found {found}")]
    Type {
        /// The event and field of the value.
        at: Location,
        /// What the format requires there.
        expected: &'static str,
        /// What the payload holds there.
        found: &'static str,
    },
    /// An integer that does not fit the field.
    #[error("{at}: integer {value} out of range ({range})")]
    OutOfRange {
        /// The event and field of the integer.
        at: Location,
        /// The value read.
        value: i128,
        /// The range allowed.
        range: &'static str,
    },
    /// An array or map longer than the decoder accepts.
    #[error("{at}: {len} elements exceed the cap of {cap}")]
    TooLong {
        /// The event and field of the array or map.
        at: Location,
        /// The length the payload declares.
        len: usize,
        /// The most elements accepted there.
        cap: usize,
    },
    /// The batch array has a length other than 2 or 3.
    #[error("batch: array of {len} elements, expected [ts, events, attn_dp_rank]")]
    BatchShape {
        /// The length found.
        len: usize,
    },
    /// A tagged-array event with too few elements for its type.
    #[error("{at}: {len} elements, {kind} needs at least {min}")]
    EventShape {
        /// The event (field `event`).
        at: Location,
        /// The event type.
        kind: &'static str,
        /// The elements found (tag included).
        len: usize,
        /// The minimum (tag included).
        min: usize,
    },
    /// An event type this decoder does not know.
    #[error("{at}: unknown event type {tag:?}")]
    UnknownEvent {
        /// The event and field of the tag.
        at: Location,
        /// The tag found.
        tag: String,
    },
    /// A storage medium this decoder does not know.
    #[error("{at}: unknown storage medium {medium:?}")]
    UnknownMedium {
        /// The event and field of the medium.
        at: Location,
        /// The medium found.
        medium: String,
    },
    /// A tagged-map event without a required field.
    #[error("{at}: missing")]
    MissingField {
        /// The event and the missing field.
        at: Location,
    },
    /// `block_size` of 0.
    #[error("{at}: block_size must be at least 1")]
    ZeroBlockSize {
        /// The event whose `block_size` is 0.
        at: Location,
    },
    /// A string that is not UTF-8.
    #[error("{at}: string is not valid UTF-8")]
    Utf8 {
        /// The event and field of the string.
        at: Location,
    },
    /// Values nested deeper than the decoder follows (inside an ignored field).
    #[error("{at}: values nested deeper than {max}")]
    TooDeep {
        /// The event and field the nesting is in.
        at: Location,
        /// The depth limit.
        max: usize,
    },
    /// Bytes left after the batch.
    #[error("{count} trailing byte(s) after the batch")]
    Trailing {
        /// Bytes after the batch's end.
        count: usize,
    },
}

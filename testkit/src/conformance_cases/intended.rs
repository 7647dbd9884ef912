//! What the sim may report differently from SGLang 0.5.23 in the [`CASES`](super::CASES), each
//! with its reason, and the numeric ranges both must keep. Paths are those of
//! [`Answer::shape`](super::Answer::shape): `$.<status>.<media type>` then the body.

use crate::shape::{DiffKind, Intended, PatternError, Spec};

/// Values both SGLang and the sim must keep in range: `(path, min, max)`.
pub const RANGES: &[(&str, f64, f64)] = &[
    ("$.*.*.loads[*].token_usage", 0.0, 1.0),
    ("$.*.*.loads[*].utilization", 0.0, 1.0),
    ("$.*.*.loads[*].cache_hit_rate", 0.0, 1.0),
    ("$.*.*.loads[*].max_total_num_tokens", 1.0, 1e12),
    ("$.*.*.max_total_num_tokens", 1.0, 1e12),
    ("$.*.*.internal_states[*].memory_usage.token_capacity", 1.0, 1e12),
];

/// Intended differences.
pub const INTENDED: &[Intended] = &[
    Intended::only(
        "$.*.*.accelerator",
        DiffKind::Type,
        "the sim names the device it emulates (`[device] name`, an MI355X); SGLang on CPU reports null",
    ),
    Intended::only(
        "$.*.*.loads[*].decode_moments",
        DiffKind::Type,
        "null until a rank's first decode batch: SGLang's start-up warm-up request runs one, the sim has no warm-up",
    ),
    Intended::only(
        "$.**.cached_tokens_details",
        DiffKind::Type,
        "null when no prompt token came from the cache; whether one did depends on each worker's cache history",
    ),
    Intended::only(
        "$.**.bytes",
        DiffKind::Length,
        "a logprob entry's bytes are its token's text: the sim's output words are not the model's tokens",
    ),
    Intended::only(
        "$.**.logprobs.top_logprobs[*].*",
        DiffKind::Missing,
        "completions' top_logprobs are keyed by token text, which the sim does not reproduce",
    ),
    Intended::only(
        "$.**.logprobs.top_logprobs[*].*",
        DiffKind::Extra,
        "completions' top_logprobs are keyed by token text, which the sim does not reproduce",
    ),
];

/// [`RANGES`] and [`INTENDED`] as a comparison [`Spec`].
///
/// # Errors
/// Never for the tables as written (a test parses them).
pub fn spec() -> Result<Spec, PatternError> {
    let mut spec = Spec::new().allow(INTENDED)?;
    for (path, min, max) in RANGES {
        spec = spec.range(path, *min, *max)?;
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tables_parse_and_every_entry_has_a_reason() {
        super::spec().unwrap();
        for i in super::INTENDED {
            assert!(i.reason.len() > 20, "{}", i.path);
        }
    }
}

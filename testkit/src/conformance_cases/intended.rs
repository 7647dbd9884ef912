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

/// Why a stream event's token arrays differ in length.
const PER_STEP: &str = "a stream event carries one decode step's tokens: one per event for SGLang without \
    speculation, 3.61 on average for the sim's calibrated MTP acceptance (timing, not shape)";

/// Intended differences inside stream events.
pub const STREAM_INTENDED: &[Intended] = &[
    Intended::only("$.*.text/event-stream[*].data.output_ids", DiffKind::Length, PER_STEP),
    Intended::only(
        "$.*.text/event-stream[*].data.meta_info.output_token_logprobs",
        DiffKind::Length,
        PER_STEP,
    ),
    Intended::only("$.*.text/event-stream[*].data.meta_info.output_top_logprobs", DiffKind::Length, PER_STEP),
    Intended::only("$.*.text/event-stream[*].data.choices[*].logprobs.*", DiffKind::Length, PER_STEP),
    Intended::only("$.*.text/event-stream[*].data.choices[*].logprobs.content", DiffKind::Length, PER_STEP),
];

/// Intended differences of single cases: `(case name, difference)`.
pub const CASE_INTENDED: &[(&str, Intended)] = &[(
    "generate_stop",
    Intended::only(
        "$.*.*.output_ids",
        DiffKind::Length,
        "the stop string matches the sim's words at another token than the model's",
    ),
)];

/// [`spec`] with the intended differences of `case` too.
///
/// # Errors
/// Never for the tables as written (a test parses them).
pub fn spec_for(case: &super::Case) -> Result<Spec, PatternError> {
    let own: Vec<Intended> =
        CASE_INTENDED.iter().filter(|(name, _)| *name == case.name).map(|(_, i)| *i).collect();
    spec()?.allow(&own)
}

/// [`RANGES`] and [`INTENDED`] as a comparison [`Spec`].
///
/// # Errors
/// Never for the tables as written (a test parses them).
pub fn spec() -> Result<Spec, PatternError> {
    let mut spec = Spec::new().allow(INTENDED)?.allow(STREAM_INTENDED)?;
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
        let all = super::INTENDED
            .iter()
            .chain(super::STREAM_INTENDED)
            .chain(super::CASE_INTENDED.iter().map(|(_, i)| i));
        for i in all {
            assert!(i.reason.len() > 20, "{}", i.path);
        }
        for (name, _) in super::CASE_INTENDED {
            let case =
                super::super::CASES.iter().find(|c| c.name == *name).unwrap_or_else(|| panic!("{name}"));
            super::spec_for(case).unwrap();
        }
    }
}

//! `--match-seed-load`: shapes an agentic replay to the original study's operating point.
//!
//! The original study's study (1P1D, 8 decode ranks, C88) held 4.66 running requests per rank at 2.87
//! requests/s. By Little's law that is 8 × 4.66 / 2.87 ≈ 13 s of decode per request, ≈ 1,000
//! output tokens at its ~13 ms per token, and with its 8.3 s mean TTFT a lane cycle of
//! 88 / 2.87 ≈ 30.7 s leaves ≈ 9 s of think time. The published agentic traces average ~400
//! output tokens and, with the 300 s idle cap, 14–50 s of think time, so at C88 an 8-rank decode
//! holds ~1 request per rank.
//!
//! The preset measures the sessions a closed-loop run starts with (the first `concurrency`
//! sessions, every turn and sub-agent turn) and sets
//!
//! ```text
//! output-scale     = 1,000 / mean(output tokens)
//! think-time-scale = 9 s / mean(min(think time, idle cap))     (turns after a session's first)
//! ```
//!
//! It changes nothing else: lengths and think times keep the trace's shape, only their means
//! move to the original study's.

use super::trace::{Format, Session, Source, TraceError};

/// Mean output tokens per request at the original study's operating point.
pub(crate) const SEED_OUTPUT_TOKENS: f64 = 1_000.0;
/// Mean think time per request at the original study's operating point, seconds.
pub(crate) const SEED_THINK_S: f64 = 9.0;

/// The trace's means over the measured sessions and the scales that move them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SeedLoad {
    pub(crate) sessions: usize,
    pub(crate) requests: usize,
    pub(crate) mean_output_tokens: f64,
    /// After the idle-gap cap.
    pub(crate) mean_think_s: f64,
    pub(crate) output_scale: f64,
    pub(crate) think_time_scale: f64,
}

/// Measures `sessions` (already read) with the idle-gap cap `cap_s`.
pub(crate) fn measure(sessions: &[Session], cap_s: f64) -> SeedLoad {
    let (mut outputs, mut thinks) = (Vec::new(), Vec::new());
    let all = sessions
        .iter()
        .flat_map(|s| std::iter::once(s).chain(s.subagents.iter().map(|a| a.session.as_ref())));
    for s in all {
        for (i, t) in s.turns.iter().enumerate() {
            outputs.push(f64::from(t.output_tokens));
            if i > 0 {
                thinks.push(t.think_s.max(0.0).min(cap_s));
            }
        }
    }
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    let (out, think) = (mean(&outputs), mean(&thinks));
    SeedLoad {
        sessions: sessions.len(),
        requests: outputs.len(),
        mean_output_tokens: out,
        mean_think_s: think,
        output_scale: if out > 0.0 { SEED_OUTPUT_TOKENS / out } else { 1.0 },
        think_time_scale: if think > 0.0 { SEED_THINK_S / think } else { 1.0 },
    }
}

/// Reads the first `sessions` sessions of the trace and measures them.
pub(crate) fn from_trace(
    trace: &Source,
    format: Format,
    sessions: usize,
    cap_s: f64,
) -> Result<SeedLoad, TraceError> {
    let read: Vec<Session> = trace.open(format)?.take(sessions).collect::<Result<_, _>>()?;
    Ok(measure(&read, cap_s))
}

impl std::fmt::Display for SeedLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "match-seed-load: the first {} sessions ({} requests) average {:.0} output tokens and {:.1} s think time (capped) → output-scale {:.3}, think-time-scale {:.3} (targets {SEED_OUTPUT_TOKENS:.0} tokens, {SEED_THINK_S:.0} s)",
            self.sessions,
            self.requests,
            self.mean_output_tokens,
            self.mean_think_s,
            self.output_scale,
            self.think_time_scale
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::trace::{SubAgent, Turn};
    use super::*;

    fn turn(out: u32, think_s: f64) -> Turn {
        Turn { at_ms: 0.0, think_s, input_tokens: 1, output_tokens: out, blocks: vec![] }
    }

    fn session(turns: Vec<Turn>, subagents: Vec<SubAgent>) -> Session {
        Session { index: 0, name: String::new(), block_tokens: 64, turns, subagents }
    }

    #[test]
    fn the_scales_move_the_means_to_the_seeds() {
        let agent = Arc::new(session(vec![turn(100, 1000.0), turn(300, 3.0)], vec![]));
        let s = [
            session(
                vec![turn(200, 999.0), turn(600, 10.0), turn(400, 1_000.0)],
                vec![SubAgent { before_turn: 1, session: agent }],
            ),
            session(vec![turn(400, 0.0)], vec![]),
        ];
        let m = measure(&s, 300.0);
        assert_eq!((m.sessions, m.requests), (2, 6));
        // Outputs 200, 600, 400, 100, 300, 400 → 333.3; thinks after first turns: 10, 300 (capped), 3.
        assert!((m.mean_output_tokens - 2_000.0 / 6.0).abs() < 1e-9);
        assert!((m.mean_think_s - 313.0 / 3.0).abs() < 1e-9);
        assert!((m.output_scale * m.mean_output_tokens - SEED_OUTPUT_TOKENS).abs() < 1e-9);
        assert!((m.think_time_scale * m.mean_think_s - SEED_THINK_S).abs() < 1e-9);
        assert!(m.to_string().contains("output-scale 3.000"), "{m}");
    }

    #[test]
    fn an_empty_window_leaves_the_trace_alone() {
        let m = measure(&[session(vec![turn(0, 0.0)], vec![])], 300.0);
        assert_eq!((m.output_scale, m.think_time_scale), (1.0, 1.0));
    }
}

//! Where a trace comes from: a file (`--trace PATH`, plain or `.gz`), or one of the synthetic
//! traces the bench generates ([`super::synthetic`]), `--trace builtin:mooncake` or
//! `builtin:agentic`, which is what a command runs without `--trace`. Either way the sessions
//! come out of the same [`TraceReader`]: a built-in trace is generated as trace lines, one at a
//! time as the reader asks for them, and parsed like a file's.

use std::fmt;
use std::io::{self, BufRead, Read};
use std::path::PathBuf;
use std::str::FromStr;

use rand::SeedableRng as _;
use rand::rngs::StdRng;

use super::synthetic::{self, agentic, mooncake};
use super::{Format, TraceError, TraceReader};

/// A trace the bench generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    /// Mooncake-shaped requests, for open loop.
    Mooncake,
    /// Agentic sessions, for closed loop.
    Agentic,
}

impl Builtin {
    /// The format its lines are in.
    pub(crate) fn format(self) -> Format {
        match self {
            Builtin::Mooncake => Format::Mooncake,
            Builtin::Agentic => Format::Agentic,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Builtin::Mooncake => "mooncake",
            Builtin::Agentic => "agentic",
        }
    }

    /// What it holds, for the notice.
    fn holds(self) -> String {
        match self {
            Builtin::Mooncake => format!("{} Mooncake-shaped requests", synthetic::MOONCAKE_REQUESTS),
            Builtin::Agentic => format!("{} agentic sessions", synthetic::AGENTIC_SESSIONS),
        }
    }

    /// The real trace of its kind, where `cargo xtask traces` puts it.
    fn real(self) -> &'static str {
        match self {
            Builtin::Mooncake => "traces/mooncake/conversation_trace.jsonl.gz",
            Builtin::Agentic => "traces/agentx/weka_v8.jsonl.gz",
        }
    }

    /// Its trace lines, made as they are read.
    fn lines(self) -> Box<dyn Iterator<Item = String> + Send> {
        let mut rng = StdRng::seed_from_u64(synthetic::SEED);
        match self {
            Builtin::Mooncake => Box::new(
                mooncake::generate(&mut rng, synthetic::MOONCAKE_REQUESTS).into_iter().map(|r| r.line()),
            ),
            Builtin::Agentic => {
                Box::new(agentic::Sessions::new(rng, synthetic::AGENTIC_SESSIONS).map(|s| s.line()))
            }
        }
    }
}

/// The trace of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A trace file.
    File(PathBuf),
    /// A synthetic trace the bench generates.
    Builtin(Builtin),
}

/// How `--trace` names a built-in trace.
const PREFIX: &str = "builtin:";

impl FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.strip_prefix(PREFIX) {
            None => Ok(Source::File(s.into())),
            Some("mooncake") => Ok(Source::Builtin(Builtin::Mooncake)),
            Some("agentic") => Ok(Source::Builtin(Builtin::Agentic)),
            Some(other) => Err(format!(
                "no built-in trace `{other}` (builtin:mooncake, builtin:agentic; a file of that name: ./{s})"
            )),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Builtin(b) => write!(f, "{PREFIX}{}", b.name()),
        }
    }
}

impl Source {
    /// Its sessions, read as `format` (a built-in trace is only its own format).
    pub(crate) fn open(&self, format: Format) -> Result<TraceReader, TraceError> {
        match self {
            Source::File(path) => super::open(path, format),
            Source::Builtin(b) if format != Format::Auto && format != b.format() => {
                Err(TraceError::Builtin { name: self.to_string(), wanted: format })
            }
            Source::Builtin(b) => {
                let lines = Generated { lines: b.lines(), line: Vec::new(), at: 0 };
                Ok(TraceReader::new(Box::new(lines), b.format()))
            }
        }
    }

    /// For a built-in trace, the line that says so and how to run on the real ones.
    pub(crate) fn notice(&self) -> Option<String> {
        let Source::Builtin(b) = self else { return None };
        Some(format!(
            "trace: {self}, the bench's built-in synthetic trace ({}; not a real trace, so its numbers \
             measure no real traffic); for the real traces run `cargo xtask traces`, then --trace {}",
            b.holds(),
            b.real()
        ))
    }

    /// Prints [`Source::notice`] on stderr, if any.
    pub(crate) fn announce(&self) {
        if let Some(notice) = self.notice() {
            eprintln!("{notice}");
        }
    }
}

/// Trace lines as a byte stream, each made when the reader reaches it.
struct Generated {
    lines: Box<dyn Iterator<Item = String> + Send>,
    /// The current line and its newline.
    line: Vec<u8>,
    /// Bytes of it already read.
    at: usize,
}

impl BufRead for Generated {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.at == self.line.len() {
            let Some(next) = self.lines.next() else { break };
            self.line = next.into_bytes();
            self.line.push(b'\n');
            self.at = 0;
        }
        Ok(&self.line[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.line.len());
    }
}

impl Read for Generated {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_parse_and_anything_else_is_a_file() {
        let parse = |s: &str| s.parse::<Source>();
        assert_eq!(parse("builtin:mooncake"), Ok(Source::Builtin(Builtin::Mooncake)));
        assert_eq!(parse("builtin:agentic"), Ok(Source::Builtin(Builtin::Agentic)));
        assert_eq!(
            parse("traces/agentx/weka_v8.jsonl.gz"),
            Ok(Source::File("traces/agentx/weka_v8.jsonl.gz".into()))
        );
        assert!(parse("builtin:azure").unwrap_err().contains("builtin:mooncake"));
        for s in ["builtin:agentic", "builtin:mooncake", "t.jsonl"] {
            assert_eq!(parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn the_builtin_traces_read_as_their_formats() {
        let moon = Source::Builtin(Builtin::Mooncake);
        let read: Vec<_> = moon.open(Format::Mooncake).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(read.len(), synthetic::MOONCAKE_REQUESTS);
        assert!(read.iter().all(|s| s.turns.len() == 1 && s.block_tokens == 512));
        assert_eq!(read, moon.open(Format::Auto).unwrap().collect::<Result<Vec<_>, _>>().unwrap());
        let agents = Source::Builtin(Builtin::Agentic);
        let two: Vec<_> = agents.open(Format::Auto).unwrap().take(2).collect::<Result<_, _>>().unwrap();
        assert_eq!((two[0].block_tokens, two[0].name.as_str()), (64, "synthetic_0001"));
        assert!(two.iter().all(|s| (10..=60).contains(&s.turns.len())));
        assert_ne!(two[0].turns[0].blocks[0].scope, two[1].turns[0].blocks[0].scope, "local scope");
        let err = agents.open(Format::Mooncake).err().unwrap();
        assert!(matches!(err, TraceError::Builtin { .. }), "{err}");
        assert!(moon.open(Format::Agentic).is_err());
    }

    #[test]
    fn only_a_builtin_trace_says_how_to_get_the_real_ones() {
        let notice = Source::Builtin(Builtin::Agentic).notice().unwrap();
        assert!(notice.contains("synthetic") && notice.contains("cargo xtask traces"), "{notice}");
        assert!(notice.contains("--trace traces/agentx/weka_v8.jsonl.gz"), "{notice}");
        assert!(!notice.contains('\n'));
        assert_eq!(Source::File("t.jsonl".into()).notice(), None);
    }
}

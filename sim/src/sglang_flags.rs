//! SGLang's own command-line flags, per release whose argparse this project runs: the output
//! of `launcher/tests/sglang_cli_check.py --list-flags` under SGLang 0.5.18 and 0.5.23
//! (`python/sglang/srt/server_args.py`, `ServerArgs.add_cli_args`), checked against the real
//! parsers by `launcher/tests/conformance.rs`. The sim accepts every flag SGLang accepts and
//! warns only on those SGLang itself would reject.

use std::collections::HashMap;

/// The SGLang release the sim emulates unless told otherwise.
pub const DEFAULT_SGLANG_VERSION: &str = "0.5.23";

/// How many values a flag takes (argparse's `nargs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// A switch (`store_true` and friends).
    None,
    /// Exactly one value.
    One,
    /// `?`: an optional value.
    Optional,
    /// `+` or `*`: values up to the next flag.
    Many,
}

/// The flag tables this crate carries: (release, `--flag<TAB>nargs` lines).
const TABLES: [(Release, &str); 2] = [
    (Release(0, 5, 18), include_str!("sglang_flags/0.5.18.tsv")),
    (Release(0, 5, 23), include_str!("sglang_flags/0.5.23.tsv")),
];

/// A release `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Release(u32, u32, u32);

impl Release {
    /// `0.5.23`, `0.5.18.post1` → the first three numbers.
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
        Some(Self(parts.next()??, parts.next()??, parts.next()??))
    }
}

/// The flags SGLang accepts at one emulated version.
#[derive(Debug)]
pub struct SglangFlags {
    flags: HashMap<&'static str, Arity>,
    /// Which tables were merged, e.g. "SGLang 0.5.23".
    pub source: String,
}

impl SglangFlags {
    /// The flags of `version`: its own table where one is carried; between two carried
    /// releases, a flag either of them accepts (the releases in between are not parsed here);
    /// outside them, the nearest one. An unparsable version uses the newest table.
    pub fn for_version(version: &str) -> Self {
        let (oldest, newest) = (TABLES[0].0, TABLES[TABLES.len() - 1].0);
        let v = Release::parse(version).unwrap_or(newest);
        let chosen: Vec<&(Release, &str)> = match TABLES.iter().find(|(r, _)| *r == v) {
            Some(exact) => vec![exact],
            None if v < oldest => vec![&TABLES[0]],
            None if v > newest => vec![&TABLES[TABLES.len() - 1]],
            None => TABLES.iter().collect(),
        };
        let mut flags = HashMap::new();
        for (_, text) in &chosen {
            flags.extend(text.lines().filter_map(parse_line));
        }
        let names: Vec<String> = chosen.iter().map(|(r, _)| format!("{}.{}.{}", r.0, r.1, r.2)).collect();
        Self { flags, source: format!("SGLang {}", names.join(" or ")) }
    }

    /// How many values `--name` takes, when SGLang has it.
    pub fn arity(&self, name: &str) -> Option<Arity> {
        self.flags.get(format!("--{name}").as_str()).copied()
    }
}

fn parse_line(line: &'static str) -> Option<(&'static str, Arity)> {
    let (flag, nargs) = line.split_once('\t')?;
    let arity = match nargs {
        "0" => Arity::None,
        "?" => Arity::Optional,
        "+" | "*" => Arity::Many,
        _ => Arity::One,
    };
    Some((flag, arity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_line_parses() {
        for (release, text) in TABLES {
            assert!(text.lines().count() > 400, "{release:?}");
            for line in text.lines() {
                assert!(line.starts_with("--") && parse_line(line).is_some(), "{release:?}: {line:?}");
            }
        }
    }

    #[test]
    fn versions_pick_their_tables() {
        let newest = SglangFlags::for_version("0.5.23");
        assert_eq!(newest.source, "SGLang 0.5.23");
        assert_eq!(newest.arity("disaggregation-transfer-backend"), Some(Arity::One));
        assert_eq!(newest.arity("trust-remote-code"), Some(Arity::None));
        assert_eq!(newest.arity("attn-dp-size"), Some(Arity::One), "added in 0.5.22");
        assert_eq!(newest.arity("no-such-flag"), None);
        let oldest = SglangFlags::for_version("0.5.18.post1");
        assert_eq!(oldest.source, "SGLang 0.5.18");
        assert_eq!(oldest.arity("attn-dp-size"), None);
        let between = SglangFlags::for_version("0.5.20");
        assert_eq!(between.source, "SGLang 0.5.18 or 0.5.23");
        assert_eq!(between.arity("attn-dp-size"), Some(Arity::One));
        assert_eq!(SglangFlags::for_version("0.6.1").source, "SGLang 0.5.23");
        assert_eq!(SglangFlags::for_version("0.5.10").source, "SGLang 0.5.18");
    }
}

//! SGLang's command line is large and grows every release: flags this emulator does not model
//! are dropped before clap sees the rest. A flag SGLang itself accepts
//! ([`crate::sglang_flags`]) goes with exactly the values SGLang's argparse would give it, and
//! silently (it changes nothing the emulator models); a flag SGLang would reject goes with
//! its value when the next token does not start with `--`, and is reported.

use std::collections::HashSet;
use std::ffi::OsString;

use crate::sglang_flags::{Arity, DEFAULT_SGLANG_VERSION, SglangFlags};

/// `argv` split into what clap should parse and what was dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stripped {
    /// Program name first, then the flags the sim parses.
    pub kept: Vec<OsString>,
    /// SGLang flags the emulator does not model, with their values.
    pub inert: Vec<String>,
    /// The same flags as tokens: the flag (`--x` or `--x=v`) then its values.
    pub inert_tokens: Vec<Vec<String>>,
    /// Flags SGLang would reject, with the value that seemed to go with them.
    pub rejected: Vec<String>,
}

/// The SGLang version the sim will emulate: `--sim-sglang-version` in `argv`, else
/// `INFERA_SIM_SGLANG_VERSION`, else the default — read before parsing, since it decides
/// which flags SGLang would accept.
pub fn emulated_version(argv: &[OsString]) -> String {
    const FLAG: &str = "--sim-sglang-version";
    let mut tokens = argv.iter().map(|t| t.to_string_lossy());
    while let Some(token) = tokens.next() {
        if token == FLAG {
            return tokens.next().map(|v| v.into_owned()).unwrap_or_default();
        }
        if let Some(v) = token.strip_prefix(FLAG).and_then(|r| r.strip_prefix('=')) {
            return v.to_owned();
        }
    }
    std::env::var("INFERA_SIM_SGLANG_VERSION").unwrap_or_else(|_| DEFAULT_SGLANG_VERSION.to_owned())
}

/// Splits `argv` (program name first) by what `command` parses and what `sglang` accepts.
pub fn strip_unknown(command: &clap::Command, sglang: &SglangFlags, argv: Vec<OsString>) -> Stripped {
    let known: HashSet<String> = command
        .get_arguments()
        .flat_map(|a| a.get_long().into_iter().chain(a.get_all_aliases().unwrap_or_default()))
        .map(str::to_owned)
        .chain(["help".to_owned(), "version".to_owned()])
        .collect();
    let mut out = Stripped { kept: Vec::with_capacity(argv.len()), ..Stripped::default() };
    let mut tokens = argv.into_iter().peekable();
    if let Some(program) = tokens.next() {
        out.kept.push(program);
    }
    let is_flag = |t: &OsString| t.to_string_lossy().starts_with("--");
    while let Some(token) = tokens.next() {
        let text = token.to_string_lossy().into_owned();
        let Some(flag) = text.strip_prefix("--").filter(|f| !f.is_empty()) else {
            out.kept.push(token);
            continue;
        };
        let (name, inline_value) = match flag.split_once('=') {
            Some((name, _)) => (name, true),
            None => (flag, false),
        };
        if known.contains(name) {
            out.kept.push(token);
            continue;
        }
        let arity = sglang.arity(name);
        let mut shown = text.clone();
        let mut taken = vec![text.clone()];
        if !inline_value {
            let values = match arity {
                Some(Arity::None) => 0,
                // argparse takes the next token as the value even when it looks like `-1`.
                Some(Arity::One) => 1,
                Some(Arity::Many) => usize::MAX,
                Some(Arity::Optional) | None => 1,
            };
            let must = arity == Some(Arity::One);
            for _ in 0..values {
                let Some(value) = tokens.next_if(|t| must || !is_flag(t)) else { break };
                shown.push(' ');
                shown.push_str(&value.to_string_lossy());
                taken.push(value.to_string_lossy().into_owned());
            }
        }
        match arity {
            Some(_) => {
                out.inert.push(shown);
                out.inert_tokens.push(taken);
            }
            None => out.rejected.push(shown),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("x")
            .arg(clap::Arg::new("port").long("port").alias("p0rt"))
            .arg(clap::Arg::new("on").long("on").action(clap::ArgAction::SetTrue))
    }

    fn strip(argv: &[&str]) -> (Vec<String>, Vec<String>, Vec<String>) {
        let sglang = SglangFlags::for_version("0.5.23");
        let out = strip_unknown(&command(), &sglang, argv.iter().map(OsString::from).collect());
        (out.kept.into_iter().map(|s| s.into_string().unwrap()).collect(), out.inert, out.rejected)
    }

    #[test]
    fn sglang_flags_go_with_their_values_silently() {
        let (kept, inert, rejected) = strip(&[
            "x",
            "--trust-remote-code",
            "--port",
            "1",
            "--mem-fraction-static",
            "0.8",
            "--on",
            "--attention-backend=aiter",
            "--disaggregation-transfer-backend",
            "mooncake",
            "--disaggregation-ib-device",
            "mlx5_0,mlx5_1",
        ]);
        assert_eq!(kept, ["x", "--port", "1", "--on"]);
        assert_eq!(
            inert,
            [
                "--trust-remote-code",
                "--mem-fraction-static 0.8",
                "--attention-backend=aiter",
                "--disaggregation-transfer-backend mooncake",
                "--disaggregation-ib-device mlx5_0,mlx5_1",
            ]
        );
        assert!(rejected.is_empty(), "{rejected:?}");
    }

    #[test]
    fn flags_sglang_would_reject_are_reported() {
        let (kept, inert, rejected) = strip(&["x", "--no-such-flag", "-1", "--also-not", "--on"]);
        assert_eq!(kept, ["x", "--on"]);
        assert!(inert.is_empty());
        assert_eq!(rejected, ["--no-such-flag -1", "--also-not"]);
    }

    #[test]
    fn a_switch_never_swallows_a_positional_and_a_value_may_look_negative() {
        // `--trust-remote-code` is a switch in SGLang: the next token is not its value.
        let (kept, inert, _) = strip(&["x", "--trust-remote-code", "m", "--random-seed", "-1"]);
        assert_eq!(kept, ["x", "m"]);
        assert_eq!(inert, ["--trust-remote-code", "--random-seed -1"]);
    }

    #[test]
    fn the_emulated_version_is_read_before_parsing() {
        let argv = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(emulated_version(&argv(&["x", "--sim-sglang-version", "0.5.18"])), "0.5.18");
        assert_eq!(emulated_version(&argv(&["x", "--sim-sglang-version=0.5.20", "--port", "1"])), "0.5.20");
    }

    #[test]
    fn known_flags_aliases_and_inline_values_stay() {
        let (kept, inert, rejected) = strip(&["x", "--port=5", "--p0rt", "6", "--help"]);
        assert_eq!(kept, ["x", "--port=5", "--p0rt", "6", "--help"], "aliases are known flags");
        assert!(inert.is_empty() && rejected.is_empty());
    }
}

//! SGLang's command line is large and grows every release: flags this emulator does not know
//! (by long name or alias) are dropped with a warning before clap sees the rest, together with
//! their value when the next token does not start with `--`.

use std::collections::HashSet;
use std::ffi::OsString;

/// `argv` (program name first) split into what clap should parse and the dropped flags.
pub fn strip_unknown(command: &clap::Command, argv: Vec<OsString>) -> (Vec<OsString>, Vec<String>) {
    let known: HashSet<String> = command
        .get_arguments()
        .flat_map(|a| a.get_long().into_iter().chain(a.get_all_aliases().unwrap_or_default()))
        .map(str::to_owned)
        .chain(["help".to_owned(), "version".to_owned()])
        .collect();
    let mut kept = Vec::with_capacity(argv.len());
    let mut dropped = Vec::new();
    let mut tokens = argv.into_iter().peekable();
    if let Some(program) = tokens.next() {
        kept.push(program);
    }
    while let Some(token) = tokens.next() {
        let text = token.to_string_lossy().into_owned();
        let Some(flag) = text.strip_prefix("--").filter(|f| !f.is_empty()) else {
            kept.push(token);
            continue;
        };
        let (name, inline_value) = match flag.split_once('=') {
            Some((name, _)) => (name, true),
            None => (flag, false),
        };
        if known.contains(name) {
            kept.push(token);
            continue;
        }
        let mut shown = text.clone();
        if !inline_value {
            let takes_next = tokens.peek().is_some_and(|next| !next.to_string_lossy().starts_with("--"));
            if takes_next && let Some(value) = tokens.next() {
                shown.push(' ');
                shown.push_str(&value.to_string_lossy());
            }
        }
        dropped.push(shown);
    }
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("x")
            .arg(clap::Arg::new("port").long("port").alias("p0rt"))
            .arg(clap::Arg::new("on").long("on").action(clap::ArgAction::SetTrue))
    }

    fn strip(argv: &[&str]) -> (Vec<String>, Vec<String>) {
        let (kept, dropped) = strip_unknown(&command(), argv.iter().map(OsString::from).collect());
        (kept.into_iter().map(|s| s.into_string().unwrap()).collect(), dropped)
    }

    #[test]
    fn unknown_flags_go_with_their_values() {
        let (kept, dropped) = strip(&[
            "x",
            "--trust-remote-code",
            "--port",
            "1",
            "--mem-fraction-static",
            "0.8",
            "--on",
            "--attention-backend=aiter",
            "--offset",
            "-1",
        ]);
        assert_eq!(kept, ["x", "--port", "1", "--on"]);
        assert_eq!(
            dropped,
            ["--trust-remote-code", "--mem-fraction-static 0.8", "--attention-backend=aiter", "--offset -1"]
        );
    }

    #[test]
    fn known_flags_aliases_and_inline_values_stay() {
        let (kept, dropped) = strip(&["x", "--port=5", "--p0rt", "6", "--help"]);
        assert_eq!(kept, ["x", "--port=5", "--p0rt", "6", "--help"], "aliases are known flags");
        assert!(dropped.is_empty());
    }
}

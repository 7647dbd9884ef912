//! Deployment files (TOML → plan) over arbitrary text and files mutated from valid ones: never a
//! panic; a value of the wrong type or an unknown key is an error naming its line; whatever
//! else is refused names a line of the file.

use std::path::Path;

use infera_launcher::deployment::{self, Engine, LoadError};
use infera_launcher::{LaunchError, plan_text};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

fn config(cases: u32) -> ProptestConfig {
    let persistence = FileFailurePersistence::Direct("proptest-regressions/deployment_fuzz.txt");
    ProptestConfig { cases, failure_persistence: Some(Box::new(persistence)), ..ProptestConfig::default() }
}

/// A PD deployment (as `tests/bad_files.rs` starts from) and the file with every key.
const PD: &str = include_str!("fixtures/pd.toml");
const KITCHEN_SINK: &str = include_str!("fixtures/kitchen_sink.toml");

fn base() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![PD, KITCHEN_SINK])
}

/// The outcome of planning `text`, or `None` for a file that would make the checker ask a
/// Python interpreter for its SGLang version (engine sglang without `sglang_version`).
fn plan(text: &str) -> Option<Result<(), LaunchError>> {
    if let Ok(f) = deployment::parse(Path::new("d.toml"), text)
        && f.engine == Engine::Sglang
        && f.sglang_version.is_none()
    {
        return None;
    }
    Some(plan_text(Path::new("d.toml"), text).map(drop))
}

/// Every line an error names: a parse error's, or each problem's (0: a defaulted value).
fn lines_named(e: &LaunchError) -> Vec<usize> {
    match e {
        LaunchError::Load(LoadError::Parse { line, .. }) => vec![*line],
        LaunchError::Invalid(i) => i.problems.iter().map(|p| p.line).collect(),
        other => panic!("planning text cannot fail with {other}"),
    }
}

fn message(e: &LaunchError) -> String {
    match e {
        LaunchError::Load(LoadError::Parse { message, .. }) => message.clone(),
        other => other.to_string(),
    }
}

/// `key = value` lines: (1-based line, where the value starts).
fn assignments(text: &str) -> Vec<(usize, usize)> {
    let mut at = 0;
    let mut out = Vec::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if let Some(eq) = line.find(" = ").filter(|_| !trimmed.starts_with('#') && !trimmed.starts_with('['))
        {
            out.push((i + 1, at + eq + 3));
        }
        at += line.len();
    }
    out
}

/// Values of another TOML type than `value` (a float where an integer is would be accepted by a
/// float key, so integers get none).
fn other_types(value: &str) -> Vec<&'static str> {
    let v = value.trim();
    let all = ["\"x\"", "5", "true", "[1]", "{ a = 1 }"];
    let same = match v.as_bytes().first() {
        Some(b'"') => "\"x\"",
        Some(b'[') => "[1]",
        Some(b'{') => "{ a = 1 }",
        Some(b't' | b'f') => "true",
        _ => "5",
    };
    all.into_iter().filter(|o| *o != same).collect()
}

fn replace_line_value(text: &str, value_at: usize, with: &str) -> String {
    let end = text[value_at..].find('\n').map_or(text.len(), |n| value_at + n);
    format!("{}{with}{}", &text[..value_at], &text[end..])
}

fn char_boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[derive(Clone, Debug)]
enum Edit {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Insert(usize, String),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let text = prop_oneof![
        prop::sample::select(vec![
            "\n", "=", "\"", "[", "]", "#", "é", "€", "\u{0}", "\r", " = 1", "[[x]]\n", "''"
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ];
    prop_oneof![
        2 => any::<usize>().prop_map(Edit::DeleteLine),
        1 => any::<usize>().prop_map(Edit::DuplicateLine),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        3 => (any::<usize>(), text).prop_map(|(at, s)| Edit::Insert(at, s)),
        1 => any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(text: &str, e: &Edit) -> String {
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let n = lines.len().max(1);
    lines.resize(n, "");
    match e {
        Edit::DeleteLine(i) => drop(lines.remove(i % n)),
        Edit::DuplicateLine(i) => lines.insert(i % n, lines[i % n]),
        Edit::SwapLines(a, b) => lines.swap(a % n, b % n),
        Edit::Insert(at, s) => {
            let at = char_boundary(text, *at);
            return format!("{}{s}{}", &text[..at], &text[at..]);
        }
        Edit::Truncate(at) => return text[..char_boundary(text, *at)].to_owned(),
    }
    lines.concat()
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn the_bases_plan(text in base()) {
        prop_assert!(plan(text).expect("versioned").is_ok(), "{:?}", plan(text));
    }

    #[test]
    fn arbitrary_text_never_panics(
        text in any::<String>(), bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        for t in [text, String::from_utf8_lossy(&bytes).into_owned()] {
            if let Some(Err(e)) = plan(&t) {
                let lines = t.split('\n').count();
                prop_assert!(lines_named(&e).iter().all(|l| *l <= lines), "{e}");
            }
        }
    }

    #[test]
    fn a_value_of_another_type_is_refused_at_its_line(
        text in base(), which in any::<prop::sample::Index>(), pick in any::<prop::sample::Index>(),
    ) {
        let spots = assignments(text);
        let (line, value_at) = spots[which.index(spots.len())];
        let value = &text[value_at..text[value_at..].find('\n').map_or(text.len(), |n| value_at + n)];
        let others = other_types(value);
        let with = others[pick.index(others.len())];
        let bent = replace_line_value(text, value_at, with);
        if let Some(result) = plan(&bent) {
            let e = result.expect_err(&format!("{value} → {with} on line {line} accepted"));
            prop_assert!(matches!(e, LaunchError::Load(LoadError::Parse { .. })), "{e}");
            prop_assert_eq!(lines_named(&e), vec![line], "{}", e);
        }
    }

    #[test]
    fn an_unknown_key_is_refused_at_its_line(text in base(), after in any::<prop::sample::Index>()) {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        // After a line that ends a value (not inside a multi-line one), or at the top.
        let at = after.index(lines.len() + 1);
        let bent = format!("{}bogus_key = 1\n{}", lines[..at].concat(), lines[at..].concat());
        let e = plan(&bent).expect("versioned").expect_err("an unknown key");
        prop_assert_eq!(lines_named(&e), vec![at + 1], "{}", e);
        let m = message(&e);
        prop_assert!(m.contains("unknown field `bogus_key`") || m.contains("invalid type: integer"), "{m}");
    }

    #[test]
    fn mutated_files_plan_or_name_a_line(text in base(), edits in prop::collection::vec(edit(), 1..4)) {
        let bent = edits.iter().fold(text.to_owned(), |t, e| apply(&t, e));
        if let Some(Err(e)) = plan(&bent) {
            let lines = bent.split('\n').count();
            prop_assert!(lines_named(&e).iter().all(|l| *l <= lines), "{e}");
            prop_assert!(!message(&e).is_empty());
        }
    }
}

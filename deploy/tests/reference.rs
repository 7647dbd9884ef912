//! The manual's command-line references against the binaries: every flag a binary's `--help`
//! lists (each subcommand's too) is documented on its reference page, so a flag added to the
//! code without a line in the manual fails here. The metrics reference is checked against a
//! scrape of the real binaries in `monitoring.rs`.

use std::path::PathBuf;
use std::process::Command;

/// A binary (and subcommand) and the page that documents its flags.
struct Page {
    binary: &'static str,
    subcommand: &'static [&'static str],
    page: &'static str,
}

const PAGES: &[Page] = &[
    Page { binary: "infera-control", subcommand: &[], page: "reference/cli.md" },
    Page { binary: "infera-proxy", subcommand: &[], page: "reference/proxy_cli.md" },
    Page { binary: "infera-launch", subcommand: &["up"], page: "reference/launcher.md" },
    Page { binary: "infera-sim", subcommand: &[], page: "reference/sim.md" },
];

/// Flags every clap binary has, which no page needs to list.
const EVERYWHERE: [&str; 2] = ["--help", "--version"];

fn manual() -> PathBuf {
    infera_deploy::dir().parent().expect("deploy/ is in the workspace").join("manual")
}

/// The long flags a `--help` text lists, in order, once each.
fn flags(help: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        let Some(long) = line.split([' ', ',', '=']).find(|w| w.starts_with("--") && w.len() > 2) else {
            continue;
        };
        if !EVERYWHERE.contains(&long) && !out.iter().any(|f| f == long) {
            out.push(long.to_owned());
        }
    }
    out
}

/// Whether `text` names `flag` as a whole flag (not as the start of a longer one).
fn names(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(at, _)| {
        let next = text[at + flag.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn help_lists_flags_and_the_check_sees_whole_flags_only() {
    let help = "Options:\n  -h, --help\n      --workers <WORKERS>\n          text --not-a-flag\n  \
                --etcd=<URL>\n      --workers <W>\n";
    assert_eq!(flags(help), ["--workers", "--etcd"]);
    assert!(names("use `--etcd URL`", "--etcd"));
    assert!(!names("use `--etcd-ca FILE`", "--etcd"));
}

#[test]
fn every_flag_of_every_binary_is_on_its_reference_page() {
    let mut missing = Vec::new();
    for p in PAGES {
        let binary =
            infera_testkit::process::binary(p.binary).expect("the binary (cargo build --workspace --bins)");
        let out = Command::new(&binary).args(p.subcommand).arg("--help").output().expect("--help runs");
        assert!(
            out.status.success(),
            "{} {:?} --help: {}",
            p.binary,
            p.subcommand,
            String::from_utf8_lossy(&out.stderr)
        );
        let help = String::from_utf8(out.stdout).expect("help is UTF-8");
        let listed = flags(&help);
        assert!(
            listed.len() >= 3,
            "{} {:?}: too few flags read from its help: {listed:?}",
            p.binary,
            p.subcommand
        );
        let page = std::fs::read_to_string(manual().join(p.page)).expect("the reference page");
        for flag in listed.iter().filter(|f| !names(&page, f)) {
            missing.push(format!(
                "{} {}: {flag} is not in manual/{}",
                p.binary,
                p.subcommand.join(" "),
                p.page
            ));
        }
    }
    assert!(missing.is_empty(), "flags the manual does not document:\n{}", missing.join("\n"));
}

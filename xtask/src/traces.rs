//! `cargo xtask traces [--from DIR] [--into DIR]`: puts the public request traces the
//! benchmarks replay into `traces/` (git-ignored), each checked against the sha256 of its
//! content ([`catalog::TRACES`]; sources and licences in manual/reference/traces.md).
//!
//! - By default each is downloaded from its repository on GitHub at a fixed commit
//!   (`raw.githubusercontent.com`, with curl): one file, or for the agentic session sets one
//!   file per session, joined one per line in id order. It is checked, then written with
//!   `gzip -9 -n` (no name or time in the header).
//! - `--from DIR` copies them from a folder laid out the same way (a colleague's `traces/`, a
//!   mirror), checked the same way: for machines that do not reach GitHub.
//!
//! A file already in place with the right content is kept. Nothing is written unless it checks.

mod catalog;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail, ensure};

use crate::setup;
use catalog::{Source, TRACES, Trace};

const USAGE: &str = "usage: cargo xtask traces [--from DIR] [--into DIR]";

/// The command line.
#[derive(Debug, PartialEq)]
struct Options {
    from: Option<PathBuf>,
    into: PathBuf,
}

fn options(repo: &Path, args: &[String]) -> anyhow::Result<Options> {
    let mut o = Options { from: None, into: repo.join("traces") };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value =
            || args.next().map(PathBuf::from).with_context(|| format!("{arg} takes a folder; {USAGE}"));
        match arg.as_str() {
            "--from" => o.from = Some(value()?),
            "--into" => o.into = value()?,
            other => bail!("unknown flag {other:?}; {USAGE}"),
        }
    }
    Ok(o)
}

pub(crate) fn run(repo: &Path, args: &[String]) -> anyhow::Result<()> {
    let o = options(repo, args)?;
    if o.from.is_none() && !setup::on_path("curl") {
        bail!("downloading the traces needs curl (apt-get install curl), or give --from DIR");
    }
    for trace in TRACES {
        let dest = o.into.join(trace.file);
        if dest.is_file() && content_sha256(&dest)? == trace.sha256 {
            println!("{:<52} {:<11} in place", trace.file, trace.licence);
            continue;
        }
        std::fs::create_dir_all(dest.parent().expect("a file under traces/"))?;
        let how = match &o.from {
            Some(from) => copy(trace, &from.join(trace.file), &dest)?,
            None => download(trace, &dest)?,
        };
        println!("{:<52} {:<11} {how}", trace.file, trace.licence);
    }
    println!("\nin {}: replay them with `infera-bench … --trace traces/<file>`", o.into.display());
    Ok(())
}

/// `src` (gzip) to `dest`, once its content checks.
fn copy(trace: &Trace, src: &Path, dest: &Path) -> anyhow::Result<&'static str> {
    ensure!(src.is_file(), "{} is not there", src.display());
    check(trace, &content_sha256(src)?, src)?;
    let part = with_suffix(dest, ".part");
    std::fs::copy(src, &part).with_context(|| format!("copying {}", src.display()))?;
    std::fs::rename(&part, dest)?;
    Ok("copied")
}

/// The trace's upstream files, joined as its source says, checked, compressed to `dest`; the
/// work folder goes however it ends.
fn download(trace: &Trace, dest: &Path) -> anyhow::Result<&'static str> {
    let work = tempfile_dir(dest)?;
    let done = fetch(trace, &work, dest);
    let _ = std::fs::remove_dir_all(&work);
    done
}

fn fetch(trace: &Trace, work: &Path, dest: &Path) -> anyhow::Result<&'static str> {
    let parts = trace.parts();
    // One curl for all the parts, a few at a time, retried.
    let mut config = String::new();
    for (i, part) in parts.iter().enumerate() {
        config.push_str(&format!("url = \"{}\"\noutput = \"{}/{i}\"\n", trace.url(part), work.display()));
    }
    let mut curl = Command::new("curl");
    curl.args(["--fail", "--silent", "--no-progress-meter", "--show-error", "--location", "--retry", "3"]);
    curl.arg("--parallel");
    curl.args(["--parallel-max", "8", "--config", "-"]).stdin(Stdio::piped());
    let mut child = curl.spawn().context("cannot run curl")?;
    child.stdin.take().expect("piped").write_all(config.as_bytes())?;
    let st = child.wait()?;
    ensure!(st.success(), "downloading {} from {}@{}: curl {st}", trace.file, trace.repo, trace.commit);

    let raw = work.join("raw");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&raw)?);
    for i in 0..parts.len() {
        let bytes = std::fs::read(work.join(i.to_string()))?;
        out.write_all(&bytes)?;
        if matches!(trace.source, Source::Sessions { .. }) {
            out.write_all(b"\n")?;
        }
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    check(trace, &sha256(Command::new("sha256sum").arg(&raw))?, &raw)?;

    let part = with_suffix(dest, ".part");
    let mut gzip = Command::new("gzip");
    gzip.args(["-9", "-n", "-c"]).arg(&raw).stdout(std::fs::File::create(&part)?);
    crate::status(gzip)?;
    std::fs::rename(&part, dest)?;
    Ok("downloaded")
}

fn check(trace: &Trace, got: &str, what: &Path) -> anyhow::Result<()> {
    ensure!(
        got == trace.sha256,
        "{}: content sha256 {got}, not {} ({} is not the trace the results were measured on)",
        trace.file,
        trace.sha256,
        what.display()
    );
    Ok(())
}

/// sha256 of a gzip file's content.
fn content_sha256(gz: &Path) -> anyhow::Result<String> {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "gzip -dc -- \"$1\" | sha256sum", "sh"]).arg(gz);
    sha256(&mut cmd)
}

/// The hash `sha256sum` prints; fails when the command does (`pipefail` is not in sh: a gzip
/// error also shows as a hash of nothing, which never matches).
fn sha256(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.stderr(Stdio::inherit()).output().with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(out.status.success(), "{cmd:?}: {}", out.status);
    let text = String::from_utf8(out.stdout)?;
    Ok(text.split_whitespace().next().unwrap_or_default().to_owned())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// A fresh work folder beside `dest` (same file system, so the result is renamed in place).
fn tempfile_dir(dest: &Path) -> anyhow::Result<PathBuf> {
    let dir = with_suffix(dest, ".download");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args;

    #[test]
    fn flags() {
        let repo = Path::new("/r");
        assert_eq!(options(repo, &[]).unwrap(), Options { from: None, into: PathBuf::from("/r/traces") });
        let o = options(repo, &args(&["--from", "/m", "--into", "/t"])).unwrap();
        assert_eq!(o, Options { from: Some(PathBuf::from("/m")), into: PathBuf::from("/t") });
        assert!(options(repo, &args(&["--from"])).is_err());
        assert!(options(repo, &args(&["--fast"])).is_err());
    }

    #[test]
    fn a_copy_whose_content_does_not_check_is_refused_and_not_written() {
        let dir = std::env::temp_dir().join(format!("xtask-traces-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("from/mooncake")).unwrap();
        let trace = &TRACES[0];
        let src = dir.join("from").join(trace.file);
        let mut gzip = Command::new("sh");
        gzip.args(["-c", "printf '{\"timestamp\":0}\\n' | gzip -9 -n > \"$1\"", "sh"]).arg(&src);
        crate::status(gzip).unwrap();
        let dest = dir.join("into").join(trace.file);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        let err = copy(trace, &src, &dest).unwrap_err().to_string();
        assert!(err.contains("content sha256") && err.contains(trace.sha256), "{err}");
        assert!(!dest.exists() && !with_suffix(&dest, ".part").exists());
        // The hash it computed is that of the content, not of the gzip bytes.
        let plain =
            sha256(Command::new("sh").args(["-c", "printf '{\"timestamp\":0}\\n' | sha256sum"])).unwrap();
        assert_eq!(content_sha256(&src).unwrap(), plain);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

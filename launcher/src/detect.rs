//! The SGLang version of an interpreter, for a deployment that names none: the configured
//! `python` is asked `importlib.metadata.version("sglang")`, the version pip recorded for the
//! installed distribution (no SGLang import, so no torch or GPU is needed to ask).

use std::fmt;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::version::{SglangVersion, VersionError};

/// What the interpreter runs.
pub const SCRIPT: &str = r#"import importlib.metadata as m; print(m.version("sglang"))"#;

/// How long the interpreter may take to answer.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Why an interpreter did not tell its SGLang version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    /// The interpreter could not be started.
    #[error("cannot run {python}: {reason}")]
    Spawn {
        /// The interpreter asked (the file's `python`).
        python: String,
        /// The OS's reason.
        reason: String,
    },
    /// It ran and failed (typically: no SGLang installed for it).
    #[error("{} failed ({status}): {reason}", Shown(python))]
    Failed {
        /// The interpreter asked (the file's `python`).
        python: String,
        /// Its exit status.
        status: String,
        /// The last line of its stderr.
        reason: String,
    },
    /// It did not answer in time (it was killed).
    #[error("{} did not answer within {} s", Shown(python), TIMEOUT.as_secs())]
    Timeout {
        /// The interpreter asked (the file's `python`).
        python: String,
    },
    /// It answered something that is not a version.
    #[error("{} printed {found:?}: {source}", Shown(python))]
    NotAVersion {
        /// The interpreter asked (the file's `python`).
        python: String,
        /// What it printed.
        found: String,
        /// Why that is not a version.
        source: VersionError,
    },
}

/// `PYTHON -c '…'`, the command as a user would retype it.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{} -c {}`", crate::plan::quote(self.0), crate::plan::quote(SCRIPT))
    }
}

/// Asks `python` which SGLang it has installed.
pub fn detect(python: &str) -> Result<SglangVersion, DetectError> {
    let mut child = Command::new(python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| DetectError::Spawn { python: python.to_owned(), reason: e.to_string() })?;
    let pid = child.id();
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let (tx, rx) = mpsc::channel();
    // Both pipes are drained while the interpreter runs, so a chatty one cannot block on them.
    std::thread::spawn(move || {
        let stderr = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = err.read_to_end(&mut s);
            s
        });
        let mut stdout = Vec::new();
        let _ = out.read_to_end(&mut stdout);
        let stderr = stderr.join().unwrap_or_default();
        let _ = tx.send((child.wait(), stdout, stderr));
    });
    let Ok((status, stdout, stderr)) = rx.recv_timeout(TIMEOUT) else {
        if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        return Err(DetectError::Timeout { python: python.to_owned() });
    };
    let status =
        status.map_err(|e| DetectError::Spawn { python: python.to_owned(), reason: e.to_string() })?;
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        let reason = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(DetectError::Failed {
            python: python.to_owned(),
            status: status.to_string(),
            reason: reason.trim().to_owned(),
        });
    }
    let found = String::from_utf8_lossy(&stdout).trim().to_owned();
    found.parse().map_err(|source| DetectError::NotAVersion { python: python.to_owned(), found, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interpreter_is_a_spawn_error() {
        let e = detect("/nonexistent/python3").unwrap_err();
        assert!(matches!(e, DetectError::Spawn { .. }), "{e}");
        assert!(e.to_string().starts_with("cannot run /nonexistent/python3: "), "{e}");
    }

    #[test]
    fn a_failing_interpreter_reports_its_last_stderr_line() {
        // `sh -c SCRIPT`: the shell cannot parse Python and says why on stderr.
        let e = detect("sh").unwrap_err();
        let DetectError::Failed { status, reason, .. } = &e else { panic!("{e}") };
        assert!(status.contains("exit status"), "{e}");
        assert!(!reason.is_empty() && reason != "no output", "{e}");
        assert!(e.to_string().starts_with("`sh -c 'import importlib.metadata"), "{e}");
    }

    #[test]
    fn output_that_is_not_a_version_is_named() {
        // `echo -c SCRIPT` prints its arguments: not a version.
        let e = detect("echo").unwrap_err();
        let DetectError::NotAVersion { found, .. } = &e else { panic!("{e}") };
        assert!(found.starts_with("-c import importlib"), "{e}");
    }
}

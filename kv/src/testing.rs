//! Test support (feature `testing`): SGLang's real KV-event publisher, driven from Rust.
//!
//! `kv/tests/sglang_kv_publisher.py` loads SGLang's unmodified `kv_events.py` from a venv
//! that holds the sglang wheel (`cargo xtask setup`; how it loads without torch: the script's own
//! docstring) and publishes what it is told over stdin, one JSON line per command, answering on
//! stdout. The venv's Python is
//! `INFERA_SGLANG_<X_Y_Z>_PYTHON` (what `cargo xtask test` sets, as for the launcher's
//! conformance test), else `.venv-sglang-<X.Y.Z>/bin/python` under the workspace root; a missing
//! one fails the test rather than skipping it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout;

/// Generous: a loaded CI machine; SGLang's import takes about a second.
const WAIT: Duration = Duration::from_secs(30);

/// This crate's folder (`kv`).
fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace root, one folder up.
fn root() -> PathBuf {
    crate_dir().parent().expect("the kv crate is in the workspace").to_owned()
}

/// The venv Python holding SGLang `version`.
///
/// # Panics
/// When there is none: run `cargo xtask setup`.
pub fn sglang_python(version: &str) -> PathBuf {
    let var = format!("INFERA_SGLANG_{}_PYTHON", version.replace('.', "_"));
    let python = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(format!(".venv-sglang-{version}/bin/python")));
    assert!(
        python.exists(),
        "no Python with SGLang {version} at {} ({var}): run `cargo xtask setup`",
        python.display()
    );
    python
}

/// SGLang's publisher for one DP rank, in a child process.
#[derive(Debug)]
pub struct SglangPublisher {
    version: String,
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl SglangPublisher {
    /// Starts the script under SGLang `version`'s venv; returns it with its greeting
    /// (`version`, `port`, `replay_port`: the rank's bound ports, `rank`, `topic`).
    ///
    /// # Panics
    /// When the script cannot start or greet, or the venv holds another SGLang.
    pub async fn start(version: &str) -> (Self, Value) {
        let script = crate_dir().join("tests/sglang_kv_publisher.py");
        let mut child = Command::new(sglang_python(version))
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the SGLang publisher script");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut s = Self { version: version.to_owned(), child, stdin, stdout };
        let hello = s.line().await;
        assert_eq!(hello["version"], version, "the venv holds another SGLang");
        (s, hello)
    }

    /// Sends one command and returns the script's answer.
    ///
    /// # Panics
    /// When the script does not answer in time or has ended.
    pub async fn command(&mut self, command: &Value) -> Value {
        self.stdin.write_all(format!("{command}\n").as_bytes()).await.expect("write to the script");
        self.line().await
    }

    /// Publishes the script's test batch `i`; its answer (`seq`, `payload`, `expect`, `lossless`).
    pub async fn publish(&mut self, i: u64) -> Value {
        self.command(&serde_json::json!({ "publish": i })).await
    }

    /// Publishes one batch of events given as JSON (`{"type": "BlockStored", "block_hashes": [...],
    /// "parent_block_hash": ..., "token_ids": [...], "block_size": n, "medium": "GPU"}`, `BlockRemoved`,
    /// `AllBlocksCleared`) built with SGLang's own classes; the answer carries its `seq`.
    pub async fn publish_events(&mut self, events: &Value) -> Value {
        self.command(&serde_json::json!({ "events": events })).await
    }

    /// Shuts the publisher down and waits for a clean exit.
    ///
    /// # Panics
    /// When the script does not exit cleanly in time.
    pub async fn quit(mut self) {
        self.stdin.write_all(b"{\"quit\": true}\n").await.expect("write to the script");
        let status = timeout(WAIT, self.child.wait()).await.expect("the script exits").expect("wait");
        assert!(status.success(), "{status}");
    }

    async fn line(&mut self) -> Value {
        let line = timeout(WAIT, self.stdout.next_line()).await.expect("the script answers in time");
        let line = line.expect("read the script's stdout").unwrap_or_else(|| {
            panic!(
                "the SGLang {} publisher script ended (see its stderr; run `cargo xtask setup`)",
                self.version
            )
        });
        serde_json::from_str(&line).expect("the script writes JSON lines")
    }
}

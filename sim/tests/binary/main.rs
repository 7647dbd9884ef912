//! The `infera-sim` binary: SGLang command lines, the listening line, signals, exit codes.

#[path = "../harness/mod.rs"]
mod harness;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_infera-sim"));
    cmd.args(["--host", "127.0.0.1", "--port", "0", "--disaggregation-bootstrap-port", "0"])
        .args(args)
        .env("INFERA_SIM_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A running sim process; killed on drop.
struct Running {
    child: Child,
    http: SocketAddr,
    bootstrap: Option<SocketAddr>,
}

impl Running {
    /// Spawns and waits for `infera-sim listening http=… bootstrap=…`.
    fn spawn(args: &[&str]) -> Self {
        let mut child = command(args).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let field = |key: &str| -> String {
            let rest = line.split(key).nth(1).unwrap_or_else(|| panic!("no {key} in {line:?}"));
            rest.split_whitespace().next().unwrap().to_owned()
        };
        let http = field("http=").parse().unwrap();
        let bootstrap = field("bootstrap=").parse().ok();
        Self { child, http, bootstrap }
    }

    /// SIGTERM, then the exit status and stderr.
    fn terminate(&mut self) -> (ExitStatus, String) {
        let ok = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
        let status = wait(&mut self.child, Duration::from_secs(20));
        let mut err = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        (status, err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait(child: &mut Child, limit: Duration) -> ExitStatus {
    infera_testkit::eventually_blocking(limit, "the process to exit", || child.try_wait().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sglang_command_line_with_unknown_flags_starts_and_stops_on_sigterm() {
    let mut sim = Running::spawn(&[
        "--model-path",
        "zai-org/GLM-5.2",
        "--not-an-sglang-flag",
        "3",
        "--disaggregation-transfer-backend",
        "mooncake",
        "--trust-remote-code",
        "--mem-fraction-static",
        "0.85",
        "--tp-size",
        "8",
        "--attn-dp-size",
        "8",
        "--disaggregation-mode",
        "decode",
        "--attention-backend=aiter",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "5",
        "--cuda-graph-max-bs-decode",
        "64",
        "--load-balance-method",
        "round_robin",
    ]);
    assert_eq!(sim.bootstrap, None, "only a prefill has a bootstrap listener");
    let (status, body) = harness::get(sim.http, "/server_info").await;
    assert_eq!(status, 200);
    let info: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(info["attn_dp_size"], 8);
    assert_eq!(info["speculative_algorithm"], "EAGLE");
    let (status, stderr) = sim.terminate();
    assert!(status.success(), "{status:?}: {stderr}");
    // SGLang's own flags the emulator does not model pass silently; only a flag SGLang itself
    // would reject is reported.
    assert_eq!(stderr.matches("ignoring").count(), 1, "{stderr}");
    assert!(
        stderr.contains("ignoring unknown flag --not-an-sglang-flag 3 (SGLang 0.5.23 has no such flag)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prefill_listens_on_its_bootstrap_port() {
    let mut sim = Running::spawn(&["--model-path", "m", "--disaggregation-mode", "prefill"]);
    let bootstrap = sim.bootstrap.expect("a bootstrap address");
    let (status, body) = harness::get(bootstrap, "/health").await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"OK"[..]));
    let (status, body) = harness::get(sim.http, "/server_info").await;
    assert_eq!(status, 200);
    let info: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(info["disaggregation_bootstrap_port"], bootstrap.port());
    assert!(sim.terminate().0.success());
}

#[test]
fn bad_configuration_exits_64() {
    for args in [
        &["--model-path", "m", "--sim-speedup", "0"][..],
        &["--sim-speedup", "1"][..],
        &["--model-path", "m", "--disaggregation-mode", "both"][..],
        &["--model-path", "m", "--sim-params", "/nonexistent.toml"][..],
    ] {
        let out = command(args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!out.stderr.is_empty());
    }
    let out = command(&["--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--sim-speedup"));
}

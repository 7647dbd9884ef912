//! Start-up validation and the process lifecycle.

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use infera_proto::pb::{self, admin_client::AdminClient};

use crate::process::*;

fn run_to_exit(mut cmd: std::process::Command) -> (i32, String) {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let status = wait(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code().unwrap(), err)
}

#[test]
fn weight_without_demand_exits_64_by_flag_and_by_env() {
    let workers = workers_file(WORKERS);
    let mut by_flag = command(&workers);
    by_flag.args(["--decode-request-weight", "1000000"]);
    let (code, err) = run_to_exit(by_flag);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--decode-request-weight") && err.contains("shadow or on"), "{err}");

    let mut by_env = command(&workers);
    by_env.env("INFERA_DECODE_REQUEST_WEIGHT", "5").env("INFERA_DECODE_INPUT_DEMAND", "off");
    let (code, err) = run_to_exit(by_env);
    assert_eq!(code, 64, "{err}");
}

#[test]
fn bad_flag_values_and_bad_workers_files_exit_64_with_the_reason() {
    let workers = workers_file(WORKERS);
    for (flag, value) in [
        ("--decode-request-weight", "-3"),
        ("--decode-request-weight", "nan"),
        ("--decode-input-demand", "yes"),
    ] {
        let mut cmd = command(&workers);
        cmd.args([flag, value]);
        let (code, err) = run_to_exit(cmd);
        assert_eq!(code, 64, "{flag} {value}: {err}");
        assert!(err.contains(flag), "{err}");
    }
    let mut both = command(&workers);
    both.args(["--etcd", "http://127.0.0.1:2379"]);
    let (code, err) = run_to_exit(both);
    assert_eq!(code, 64, "--workers and --etcd are exclusive: {err}");
    let mut neither = std::process::Command::new(env!("CARGO_BIN_EXE_infera-control"));
    neither.env_remove("INFERA_CONTROL_WORKERS").env_remove("INFERA_CONTROL_ETCD");
    let (code, err) = run_to_exit(neither);
    assert_eq!(code, 64, "a registry is required: {err}");
    assert!(err.contains("--workers") && err.contains("--etcd"), "{err}");

    let mut cmd = command(&workers);
    cmd.args(["--log", "info,=="]);
    let (code, err) = run_to_exit(cmd);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--log"), "{err}");

    let bad = workers_file(
        "[[workers]]\nid = 'd'\nrole = 'decode'\nurl = 'http://h:1'\nmodel = 'm'\ndp_sise = 4\n",
    );
    let (code, err) = run_to_exit(command(&bad));
    assert_eq!(code, 64);
    assert!(err.contains("dp_sise") && err.contains("line 6"), "{err}");
}

#[test]
fn admin_listen_conflicts_exit_64_with_the_reason() {
    let workers = workers_file(WORKERS);
    let mut lone_url = command(&workers);
    lone_url.args(["--admin-advertise-url", "http://control-admin:50052"]);
    let (code, err) = run_to_exit(lone_url);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--admin-advertise-url http://control-admin:50052 needs --admin-listen"), "{err}");

    let mut same = std::process::Command::new(env!("CARGO_BIN_EXE_infera-control"));
    same.args(["--listen", "127.0.0.1:50051", "--admin-listen", "127.0.0.1:50051", "--workers"])
        .arg(workers.path())
        .stdin(Stdio::null());
    let (code, err) = run_to_exit(same);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--admin-listen 127.0.0.1:50051 is the address of --listen"), "{err}");
}

/// Starts `cmd`, waits for its "listening" line, stops it, and returns what it logged up to then.
fn stderr_at_start(mut cmd: std::process::Command) -> String {
    let mut child =
        cmd.env("INFERA_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
        .unwrap();
    assert!(line.starts_with("infera-control listening"), "{line:?}");
    child.kill().unwrap();
    wait(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    err
}

#[test]
fn only_an_empty_static_registry_warns_that_every_pick_will_fail() {
    const WARNING: &str = "every pick will fail";
    let empty = workers_file("");
    let err = stderr_at_start(command(&empty));
    assert!(err.contains(WARNING), "an empty workers file and no etcd: {err}");

    let err = stderr_at_start(command(&workers_file(WORKERS)));
    assert!(!err.contains(WARNING), "a workers file with workers: {err}");

    // Under --etcd the workers arrive from etcd after start (none is listening here: control
    // starts anyway and keeps trying, which is all this needs).
    let mut etcd = std::process::Command::new(env!("CARGO_BIN_EXE_infera-control"));
    etcd.args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--etcd", "http://127.0.0.1:9"])
        .env_remove("INFERA_CONTROL_WORKERS")
        .env_remove("INFERA_DECODE_INPUT_DEMAND")
        .env_remove("INFERA_DECODE_REQUEST_WEIGHT")
        .stdin(Stdio::null());
    let err = stderr_at_start(etcd);
    assert!(!err.contains(WARNING), "--etcd: {err}");
}

/// `GET path` on `addr`, HTTP/1.0: the whole answer, head and body.
fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut http = std::net::TcpStream::connect(addr).unwrap();
    std::io::Write::write_all(&mut http, format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).unwrap();
    let mut text = String::new();
    http.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn readiness_waits_for_the_registry_and_its_workers_engine_facts() {
    // A static workers file is the registry. Its workers do not answer here: control is not
    // ready while it waits for their `/server_info`, and is once the bounded wait (5 s) is over.
    let started = std::time::Instant::now();
    let control = Running::spawn(command(&workers_file(WORKERS)));
    let first = http_get(control.metrics, "/readiness");
    if started.elapsed() < Duration::from_secs(4) {
        assert!(
            first.lines().next().unwrap_or_default().contains(" 503 ") && first.contains("engine facts"),
            "{first}"
        );
    }
    let answer = infera_testkit::eventually_blocking(Duration::from_secs(20), "ready after the wait", || {
        let answer = http_get(control.metrics, "/readiness");
        answer.lines().next().unwrap_or_default().contains(" 200 ").then_some(answer)
    });
    assert!(answer.ends_with("ready standalone\n"), "{answer}");

    // A replica whose etcd does not answer has not read the registry: not ready (Kubernetes
    // keeps it out of the Service and a rolling update waits for it).
    let mut replica = std::process::Command::new(env!("CARGO_BIN_EXE_infera-control"));
    replica
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--etcd", "http://127.0.0.1:9"])
        .env_remove("INFERA_CONTROL_WORKERS")
        .env_remove("INFERA_DECODE_INPUT_DEMAND")
        .env_remove("INFERA_DECODE_REQUEST_WEIGHT");
    let replica = Running::spawn(replica);
    let answer = http_get(replica.metrics, "/readiness");
    assert!(
        answer.lines().next().unwrap_or_default().contains(" 503 ") && answer.contains("registry"),
        "{answer}"
    );
    assert!(http_get(replica.metrics, "/health").contains(" 200 OK"), "alive all the same");
}

#[test]
fn env_vars_configure_it_and_sigterm_stops_it_cleanly() {
    let workers = workers_file(WORKERS);
    let mut cmd = command(&workers);
    cmd.env("INFERA_DECODE_INPUT_DEMAND", "on").env("INFERA_DECODE_REQUEST_WEIGHT", "180000");
    let mut control = Running::spawn(cmd);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = rt.block_on(async {
        let mut admin = AdminClient::connect(control.url()).await.unwrap();
        admin.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner()
    });
    assert_eq!(cfg.decode_input_demand, pb::DecodeInputDemand::On as i32);
    assert_eq!(cfg.decode_request_weight, 180_000.0);

    let text = http_get(control.metrics, "/metrics");
    assert!(text.contains("application/openmetrics-text"), "{text}");
    assert!(text.contains("# TYPE infera_router_leases gauge"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"));

    let status = control.terminate();
    assert_eq!(status.code(), Some(0));
}

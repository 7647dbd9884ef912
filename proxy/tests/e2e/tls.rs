//! TLS end to end on real processes: control's gRPC over TLS requiring client certificates
//! (mutual TLS), a proxy that reaches it at `https://` with its own certificate and serves
//! HTTPS itself, and both certificates replaced on SIGHUP. The clients are the real ones: the
//! OpenAI Python client, curl, grpcurl (`-cacert`) and `openssl s_client`; the certificates are
//! made at run time by a test CA.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use infera_testkit::http::metric_sum;
use infera_testkit::tls::{Issued, TestCa};
use infera_testkit::{ClusterSpec, ControlSpec, ProxySpec, SimSpec, Workers};
use serde_json::Value;

use crate::harness::*;

/// Streams one chat completion through `base` trusting only `ca`; prints `{"ok", "chunks"}` or
/// `{"ok": false, "error"}`.
const STREAM: &str = r#"
import json, ssl, sys
import httpx2 as httpx
from openai import OpenAI
http = httpx.Client(verify=ssl.create_default_context(cafile=sys.argv[3]))
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0, http_client=http)
try:
    chunks = 0
    for chunk in client.chat.completions.create(
        model=sys.argv[2], messages=[{"role": "user", "content": "Hello over TLS."}],
        max_tokens=6, stream=True,
    ):
        chunks += 1
    print(json.dumps({"ok": True, "chunks": chunks}))
except Exception as e:
    print(json.dumps({"ok": False, "error": repr(e) + " " + repr(e.__cause__)}))
"#;

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// One streamed completion through the proxy at `base`, trusting `ca`.
async fn stream(base: &str, ca: &Path) -> Value {
    let (base, ca) = (base.to_owned(), ca.to_owned());
    let (_, out) = blocking(move || {
        run(Command::new(venv_tool("INFERA_PYTHON", "python")).args(["-c", STREAM, &base, MODEL]).arg(&ca))
    })
    .await;
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `curl -sS --cacert CA URL`: (success, body or error).
async fn curl(url: &str, ca: Option<&Path>) -> (bool, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10"]).arg(url);
    if let Some(ca) = ca {
        cmd.arg("--cacert").arg(ca);
    }
    blocking(move || run(&mut cmd)).await
}

/// grpcurl against an `https://` control with `-cacert` and, when given, a client certificate.
async fn grpcurl(addr: &str, ca: &Path, client: Option<&Issued>, call: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(venv_tool("INFERA_GRPCURL", "grpcurl"));
    cmd.arg("-cacert").arg(ca);
    if let Some(c) = client {
        cmd.arg("-cert").arg(&c.cert).arg("-key").arg(&c.key);
    }
    let (method, flags) = call.split_last().expect("a method");
    cmd.args(["-max-time", "10"]).args(flags).args([addr, method]);
    blocking(move || run(&mut cmd)).await
}

/// The subject of the certificate the server at `addr` presents now.
async fn presented_subject(addr: &str, client: &Issued) -> String {
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-connect", addr]).arg("-cert").arg(&client.cert).arg("-key").arg(&client.key);
    cmd.stdin(std::process::Stdio::null());
    let (_, out) = blocking(move || run(&mut cmd)).await;
    out.lines().find(|l| l.starts_with("subject=")).unwrap_or_default().to_owned()
}

/// A proxy's flags to reach an `https://` control that requires client certificates.
fn control_flags(ca: &TestCa, client: &Issued) -> [String; 6] {
    [
        "--control-ca".to_owned(),
        path(&ca.ca()),
        "--control-cert".to_owned(),
        path(&client.cert),
        "--control-key".to_owned(),
        path(&client.key),
    ]
}

fn copy(from: &Issued, to: &Issued) {
    std::fs::copy(&from.cert, &to.cert).unwrap();
    std::fs::copy(&from.key, &to.key).unwrap();
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Held requests over every target, from control's gauges.
fn held(metrics: &str) -> f64 {
    metric_sum(metrics, "infera_router_decode_demand_requests", "")
        + metric_sum(metrics, "infera_router_prefill_demand_requests", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_between_proxy_and_control_https_to_clients_and_certificates_reloaded_on_sighup() {
    let ca = TestCa::new("infera");
    let control_cert = ca.issue("control", &["127.0.0.1", "localhost"]);
    let proxy_client = ca.issue("proxy-client", &["proxy.test"]);
    let api = ca.issue("api", &["127.0.0.1"]);

    let sims = vec![sim(SimSpec::prefill("prefill-0", MODEL)), sim(SimSpec::decode("decode-0", MODEL, 2))];
    let mut spec = ClusterSpec::new(MODEL, sims);
    spec.processes = true;
    spec.proxies = 0;
    spec.control = ControlSpec::new(Workers::None).flags([
        "--decode-input-demand".to_owned(),
        "on".to_owned(),
        "--tls-cert".to_owned(),
        path(&control_cert.cert),
        "--tls-key".to_owned(),
        path(&control_cert.key),
        "--tls-client-ca".to_owned(),
        path(&ca.ca()),
    ]);
    let mut kit = spec.start().await.expect("the cluster starts");
    let control_url = kit.control.url();
    assert!(control_url.starts_with("https://"), "{control_url}");
    let control_addr = kit.control.addr.to_string();

    // Operators: grpcurl with -cacert and a client certificate; without one the handshake fails.
    let (ok, out) =
        grpcurl(&control_addr, &ca.ca(), Some(&proxy_client), &["infera.control.v1.Admin/ListTargets"]).await;
    assert!(ok, "grpcurl with a client certificate: {out}");
    assert!(out.contains("decode-0"), "{out}");
    let (ok, out) = grpcurl(&control_addr, &ca.ca(), None, &["infera.control.v1.Admin/ListTargets"]).await;
    assert!(!ok, "no client certificate, yet grpcurl got an answer: {out}");

    // A proxy with its client certificate, serving HTTPS.
    let mut proxy = ProxySpec::new(control_url.clone())
        .flags(control_flags(&ca, &proxy_client))
        .flags(["--tls-cert".to_owned(), path(&api.cert), "--tls-key".to_owned(), path(&api.key)])
        .spawn()
        .await
        .unwrap();
    assert!(proxy.url.starts_with("https://"), "{}", proxy.url);
    eventually(Duration::from_secs(30), "the HTTPS proxy to be ready through mutual TLS", async || {
        let (ok, body) = curl(&format!("{}/readiness", proxy.url), Some(&ca.ca())).await;
        (ok && body.contains("ready")).then_some(())
    })
    .await;
    let v = stream(&proxy.url, &ca.ca()).await;
    assert!(v["ok"] == true && v["chunks"].as_u64().unwrap() >= 3, "{v}");
    let plain = format!("http://{}/readiness", proxy.url.trim_start_matches("https://"));
    assert!(!curl(&plain, None).await.0, "plain HTTP on the TLS port must not be served");
    assert!(
        !curl(&format!("{}/readiness", proxy.url), None).await.0,
        "a client without the CA must not verify"
    );

    // A proxy without a client certificate never holds a lease: control refuses its handshake.
    let mut bare = ProxySpec::new(control_url.clone())
        .flags(["--control-ca".to_owned(), path(&ca.ca())])
        .spawn()
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the proxy without a certificate to fail its lease", async || {
        let m = get(&format!("{}/metrics", bare.url)).await.1;
        (metric_sum(&m, "infera_proxy_control_errors_total", "") > 0.0).then_some(())
    })
    .await;
    let (status, _) = get(&format!("{}/readiness", bare.url)).await;
    assert_eq!(
        status,
        http::StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        bare.node.process().unwrap().stderr_tail()
    );
    let m = bare.metrics().await.unwrap();
    assert_eq!(metric_sum(&m, "infera_proxy_control_lease", ""), 0.0, "{m}");

    // The proxy's certificate replaced by one of another CA, then SIGHUP: new connections get it.
    let rotated = TestCa::new("rotated");
    copy(&rotated.issue("api-2", &["127.0.0.1"]), &api);
    proxy.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the proxy to present the new certificate", async || {
        (stream(&proxy.url, &rotated.ca()).await["ok"] == true).then_some(())
    })
    .await;
    let old = stream(&proxy.url, &ca.ca()).await;
    assert!(
        old["ok"] == false && old["error"].as_str().unwrap().contains("CERTIFICATE_VERIFY_FAILED"),
        "{old}"
    );
    // A broken file, then SIGHUP: the certificate in force stays, and the reload counts as failed.
    std::fs::write(&api.cert, "not a certificate").unwrap();
    proxy.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "the failed reload to be counted", async || {
        let (_, m) = curl(&format!("{}/metrics", proxy.url), Some(&rotated.ca())).await;
        m.contains(r#"infera_proxy_tls_reloads_total{which="listener",outcome="error"} 1"#).then_some(())
    })
    .await;
    assert_eq!(stream(&proxy.url, &rotated.ca()).await["ok"], true);

    // Control's certificate replaced (same CA, new name), then SIGHUP: new handshakes present it.
    assert!(presented_subject(&control_addr, &proxy_client).await.contains("CN = control"));
    copy(&ca.issue("control-2", &["127.0.0.1"]), &control_cert);
    kit.control.node.process().unwrap().hangup().unwrap();
    eventually(Duration::from_secs(10), "control to present its new certificate", async || {
        presented_subject(&control_addr, &proxy_client).await.contains("CN = control-2").then_some(())
    })
    .await;
    let m = kit.control.metrics().await.unwrap();
    assert!(m.contains(r#"infera_control_tls_reloads_total{which="server",outcome="ok"} 1"#), "{m}");
    assert_eq!(stream(&proxy.url, &rotated.ca()).await["ok"], true, "picks go on after control's reload");

    eventually(Duration::from_secs(10), "the ledger to return to zero", async || {
        (held(&kit.control.metrics().await.ok()?) == 0.0).then_some(())
    })
    .await;
    bare.stop().await.unwrap();
    proxy.stop().await.unwrap();
}

/// `Admin/GetConfig` of the replica at `addr`, through grpcurl.
async fn config(addr: &str, ca: &Path, operator: &Issued) -> Value {
    let (ok, out) = grpcurl(addr, ca, Some(operator), &["infera.control.v1.Admin/GetConfig"]).await;
    assert!(ok, "GetConfig on {addr}: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_over_tls_forward_admin_to_the_leader_and_proxies_follow_it_at_https() {
    let ca = TestCa::new("infera");
    let replica = ca.issue("replica", &["127.0.0.1"]);
    let operator = ca.issue("operator", &["operator.test"]);
    let flags = [
        "--decode-input-demand".to_owned(),
        "on".to_owned(),
        "--tls-cert".to_owned(),
        path(&replica.cert),
        "--tls-key".to_owned(),
        path(&replica.key),
        "--tls-client-ca".to_owned(),
        path(&ca.ca()),
        "--tls-peer-ca".to_owned(),
        path(&ca.ca()),
    ];
    let sims = vec![sim(SimSpec::prefill("prefill-0", MODEL)), sim(SimSpec::decode("decode-0", MODEL, 2))];
    let mut spec = ClusterSpec::new(MODEL, sims);
    spec.processes = true;
    spec.proxies = 0;
    spec.etcd = Some(Duration::from_secs(2));
    spec.control = ControlSpec::new(Workers::None).flags(flags.clone());
    let kit = spec.start().await.expect("the cluster starts");
    let etcd = kit.etcd.as_ref().unwrap().url();
    let first = kit.control.addr.to_string();
    eventually(Duration::from_secs(30), "the first replica to lead", async || {
        (config(&first, &ca.ca(), &operator).await["leadership"]["role"] == "leader").then_some(())
    })
    .await;
    let second = ControlSpec::new(Workers::None).flags(flags).etcd(etcd).spawn().await.unwrap();
    let follower = second.addr.to_string();
    // Once the second replica knows the leader, it forwards Admin reads to it over mutual TLS:
    // its GetConfig is the leader's.
    eventually(Duration::from_secs(30), "the second replica to forward to the https leader", async || {
        let v = config(&follower, &ca.ca(), &operator).await;
        (v["leadership"]["role"] == "leader" && v["leadership"]["url"] == kit.control.url()).then_some(())
    })
    .await;

    // So is a write.
    let set = ["-d", r#"{"decode_request_weight": 4242}"#, "infera.control.v1.Admin/SetDecodeRequestWeight"];
    let (ok, out) = grpcurl(&follower, &ca.ca(), Some(&operator), &set).await;
    assert!(ok, "forwarded SetDecodeRequestWeight: {out}");
    assert_eq!(config(&first, &ca.ca(), &operator).await["decodeRequestWeight"], 4242.0);
    // Router calls on the follower name the https leader.
    let open = ["-d", r#"{"holder": "t"}"#, "infera.control.v1.Router/OpenLease"];
    let (ok, out) = grpcurl(&follower, &ca.ca(), Some(&operator), &open).await;
    assert!(
        !ok && out.contains("Unavailable")
            && out.contains("not the leader")
            && out.contains(&kit.control.url()),
        "{out}"
    );

    // A proxy given only the follower finds the leader it names and routes through it.
    let mut proxy = ProxySpec::new(second.url()).flags(control_flags(&ca, &operator)).spawn().await.unwrap();
    proxy.wait_ready(MODEL).await.unwrap();
    // The proxy holds a lease now, and it is the leader's.
    let m = kit.control.metrics().await.unwrap();
    assert_eq!(metric_sum(&m, "infera_router_leases", ""), 1.0, "the lease is the leader's: {m}");
    let url = format!("{}/v1/chat/completions", proxy.url);
    let (status, body) = post_json(&url, &chat(4, true), &[]).await;
    assert_eq!(status, http::StatusCode::OK, "{body}");
    let m = proxy.metrics().await.unwrap();
    assert_eq!(
        metric_sum(&m, "infera_proxy_fallback_picks_total", ""),
        0.0,
        "the picks were the leader's: {m}"
    );
    proxy.stop().await.unwrap();
}

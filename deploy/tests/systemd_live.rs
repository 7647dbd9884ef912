//! The systemd units run: control and a proxy started from `infera-control.service` and
//! `infera-proxy@.service` (as systemd would, [`infera_deploy::systemd::Unit`]) on a host set up
//! by the guide's own commands (manual/guides/systemd.md), with a secured test etcd. The
//! operator's per-host values are set in the installed env files: etcd's endpoint, free ports,
//! the model's tokenizer. Then, over the network, with real clients (curl, grpcurl):
//!
//! - the proxy holds a lease with control, reached at `https://` with its host's token;
//! - control refuses a Router call without a token and an Admin call without the admin token;
//! - the proxy's API answers over HTTPS under the guide's certificate, not in plain HTTP, with
//!   the guide's API key only;
//! - `/metrics` is served on the proxy's loopback metrics port, and not on the API.

#[allow(dead_code)]
mod site;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use clap::CommandFactory;
use infera_testkit::etcd::{Auth, EtcdServer};
use infera_testkit::eventually_blocking;
use infera_testkit::process::{Process, ProcessSpec, binary};
use site::Site;

const DEADLINE: Duration = Duration::from_secs(30);
/// The name clients reach the proxies by, in the guide's certificate.
const PROXY_NAME: &str = "llm.example.com";

/// Starts `unit` (instance `instance`) of `site` as a process.
fn run(site: &Site, unit: &str, instance: &str, cmd: &clap::Command) -> (Process, tempfile::TempDir) {
    let (started, credentials) = site.start(unit, instance).unwrap_or_else(|e| panic!("{e:#}"));
    // The variables as systemd hands them over, after checking that the binary reads each.
    site::argv(cmd, &started);
    let spec = ProcessSpec {
        name: unit.to_owned(),
        program: binary(&started.program).unwrap_or_else(|e| panic!("{e:#}")),
        args: started.args,
        env: started.env,
        rebind: Vec::new(),
    };
    (Process::start(spec).unwrap_or_else(|e| panic!("{e:#}")), credentials)
}

/// An instance port for the proxy unit (the API port) whose metrics port, the same with a 1 in
/// front, is free too.
fn proxy_instance() -> u16 {
    (0..200)
        .map(|i| 2000 + (u16::try_from(std::process::id() % 7000).unwrap() + i * 37) % 7999)
        .find(|p| [*p, p + 10_000].iter().all(|q| TcpListener::bind(("0.0.0.0", *q)).is_ok()))
        .expect("a free port pair")
}

/// curl's status code and body for `args` (`000` when no HTTP answer came).
fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "-m", "5", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

/// grpcurl (the project venv's, or `INFERA_GRPCURL`) with `args`: whether it succeeded, and
/// what it printed.
fn grpcurl(args: &[&str]) -> (bool, String) {
    let path = std::env::var_os("INFERA_GRPCURL")
        .map_or_else(|| infera_deploy::dir().join("../.venv/bin/grpcurl"), PathBuf::from);
    let out = Command::new(&path).args(args).output().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn control_and_a_proxy_from_the_units_speak_tls_with_tokens_and_keep_metrics_apart() {
    let site = Site::new();
    let etcd = EtcdServer::start_secure();
    let security = etcd.security_as("infera-control", Auth::Certificate);
    let issued = infera_testkit::tls::Issued {
        cert: security.cert.expect("a client certificate"),
        key: security.key.expect("its key"),
    };
    site.etcd_files(&etcd.ca(), "control", &issued);
    site.set("control.env", "INFERA_CONTROL_ETCD", &etcd.url());
    site.set("control.env", "INFERA_CONTROL_LISTEN", "0.0.0.0:0");
    site.set("control.env", "INFERA_CONTROL_METRICS_LISTEN", "127.0.0.1:0");
    let (control, _control_credentials) =
        run(&site, "infera-control.service", "", &infera_control::Args::command());
    let grpc = control.addr("grpc=").port();
    let control_metrics = format!("http://{}/metrics", control.addr("metrics="));

    let _model = site.tokenizer();
    site.set("proxy.env", "INFERA_PROXY_CONTROL", &format!("https://127.0.0.1:{grpc}"));
    let instance = proxy_instance();
    let (proxy, _proxy_credentials) =
        run(&site, "infera-proxy@.service", &instance.to_string(), &infera_proxy::Args::command());
    let metrics = proxy.addr("metrics=");
    assert_eq!((metrics.ip().is_loopback(), metrics.port()), (true, instance + 10_000), "{metrics}");

    // The lease: control reached over TLS and its Router taking the host's token.
    let scrape = format!("http://{metrics}/metrics");
    eventually_blocking(DEADLINE, "the proxy holds a lease with control", || {
        curl(&[&scrape]).1.lines().any(|l| l == "infera_proxy_control_lease 1")
    });
    let (code, text) = curl(&[&control_metrics]);
    assert!(code == "200" && text.lines().any(|l| l == "infera_control_router_authenticated 1"), "{text}");

    // Control: TLS under the guide's CA; a Router call needs a token, Admin its token.
    let ca = site.pki.join("ca.pem").display().to_string();
    let target = format!("127.0.0.1:{grpc}");
    let (ok, text) = grpcurl(&["-cacert", &ca, "-d", "{}", &target, "infera.control.v1.Router/OpenLease"]);
    assert!(!ok && text.contains("Unauthenticated"), "a Router call without a token: {text}");
    let (ok, text) = grpcurl(&["-cacert", &ca, &target, "infera.control.v1.Admin/GetConfig"]);
    assert!(!ok && text.contains("Unauthenticated"), "Admin without its token: {text}");
    let admin = site.pki_text("control-admin.env");
    let bearer = format!("authorization: Bearer {}", admin.trim_start_matches("INFERA_ADMIN_TOKEN="));
    let (ok, text) = grpcurl(&["-cacert", &ca, "-H", &bearer, &target, "infera.control.v1.Admin/GetConfig"]);
    assert!(ok, "Admin with the guide's token: {text}");
    let (ok, text) = grpcurl(&["-plaintext", &target, "infera.control.v1.Admin/GetConfig"]);
    assert!(!ok, "control answered plain text: {text}");

    // The proxy: HTTPS under the guide's certificate and name, API keys, no /metrics.
    let api = |path: &str| format!("https://{PROXY_NAME}:{instance}{path}");
    let resolve = format!("{PROXY_NAME}:{instance}:127.0.0.1");
    let https = |path: &str, extra: &[&str]| {
        let url = api(path);
        curl(
            &[&["--cacert", ca.as_str(), "--resolve", resolve.as_str()][..], extra, &[url.as_str()]].concat(),
        )
    };
    assert_eq!(https("/readiness", &[]), ("200".to_owned(), "ready\n".to_owned()));
    assert_eq!(https("/metrics", &[]).0, "404", "/metrics on the API");
    assert_eq!(https("/v1/models", &[]).0, "401", "the API without a key");
    let key = format!("authorization: Bearer {}", site.pki_text("team-a.key"));
    assert_eq!(https("/v1/models", &["-H", &key]).0, "200", "the API with the guide's key");
    let plain = format!("http://127.0.0.1:{instance}/readiness");
    assert_eq!(curl(&[&plain]).0, "000", "the API answered plain HTTP");
}

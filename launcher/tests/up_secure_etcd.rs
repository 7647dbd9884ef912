//! `infera-launch up` on an etcd secured as deployments run it (TLS, client certificates
//! required, auth on with infera's roles): the registrar authenticates as `infera-launch` by its
//! certificate, the control `up` starts as `infera-control` with a password (`[router.etcd]`);
//! a request goes through, and on SIGTERM the registrar's role suffices to remove every key. And
//! the refusals: security over `http://` and `[router.etcd]` without `--etcd` exit 64, a password
//! etcd refuses exits 1 before any worker starts.

mod support;

use std::path::Path;

use infera_registry::roles::{CONTROL, LAUNCH};
use infera_testkit::etcd::{Auth, EtcdServer};
use support::{Launch, deployment, until_ok};

/// The worker records under `/infera/v1/workers/`, read as root.
fn workers(etcd: &EtcdServer) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let keys = rt.block_on(etcd.infera_keys());
    keys.into_keys().filter(|k| k.starts_with(infera_registry::keys::WORKERS)).collect()
}

/// The example deployment with `[router.etcd]`: control's certificate, user and password file.
fn with_router_etcd(file: &Path, etcd: &EtcdServer) {
    let mut doc: toml::Table = toml::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let control = etcd.security_as(CONTROL.name, Auth::Password);
    let path = |p: Option<std::path::PathBuf>| toml::Value::from(p.unwrap().display().to_string());
    let section = toml::Table::from_iter([
        ("cert".to_owned(), path(control.cert)),
        ("key".to_owned(), path(control.key)),
        ("user".to_owned(), toml::Value::from(CONTROL.name)),
        ("password_file".to_owned(), path(control.password_file)),
    ]);
    doc["router"].as_table_mut().unwrap().insert("etcd".into(), section.into());
    std::fs::write(file, toml::to_string(&doc).unwrap()).unwrap();
}

#[test]
fn up_registers_and_routes_through_a_secured_etcd_each_part_with_its_role() {
    let etcd = EtcdServer::start_secure();
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path(), None);
    with_router_etcd(&file, &etcd);
    let url = etcd.url();
    let mut args = vec!["--etcd".to_owned(), url.clone()];
    args.extend(etcd.flags_as(LAUNCH.name, Auth::Certificate));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut up = Launch::start(&file, &args);
    let ready = up.until("infera-launch ready").unwrap_or_else(|| panic!("never ready:\n{}", up.stderr()));
    let proxy = ready.split("proxies=http://").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
    assert_eq!(workers(&etcd), ["/infera/v1/workers/decode-0", "/infera/v1/workers/prefill-0"]);
    let stderr = up.stderr();
    let control_line = stderr.lines().find(|l| l.contains("control: starting:")).unwrap();
    assert!(
        control_line.contains(&format!("--etcd {url} --etcd-ca"))
            && control_line.contains("--etcd-user infera-control")
            && control_line.contains("infera-control.pem"),
        "control gets [router.etcd] and the launcher's CA: {control_line}"
    );

    // Control read the workers from etcd with its own credentials: the request is routed.
    let chat =
        r#"{"model":"glm-5.2","messages":[{"role":"user","content":"hello"}],"stream":true,"max_tokens":8}"#;
    let (status, body) = until_ok(&proxy, "POST", "/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}\n{}", up.stderr());
    assert!(body.contains("[DONE]"), "{body}");

    up.terminate();
    let status = up.wait();
    assert!(status.success(), "{status}:\n{}", up.final_stderr());
    up.assert_children_gone();
    assert_eq!(workers(&etcd), Vec::<String>::new(), "the registrar's role removed its keys");
}

#[test]
fn etcd_settings_that_cannot_work_or_that_etcd_refuses_stop_up_before_any_worker() {
    let etcd = EtcdServer::start_secure();
    let dir = tempfile::tempdir().unwrap();
    let file = deployment(dir.path(), None);
    let flags = etcd.flags_as(LAUNCH.name, Auth::Password);

    let plain = etcd.url().replacen("https://", "http://", 1);
    let args: Vec<&str> =
        ["--etcd", plain.as_str()].into_iter().chain(flags.iter().map(String::as_str)).collect();
    let mut up = Launch::start(&file, &args);
    assert_eq!(up.wait().code(), Some(64), "{}", up.final_stderr());
    assert!(up.final_stderr().contains(&format!("etcd endpoint {plain} is not https://")), "{}", up.stderr());

    let wrong = dir.path().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let mut refused = flags.clone();
    let at = refused.iter().position(|f| f == "--etcd-password-file").unwrap();
    refused[at + 1] = wrong.display().to_string();
    let url = etcd.url();
    let args: Vec<&str> =
        ["--etcd", url.as_str()].into_iter().chain(refused.iter().map(String::as_str)).collect();
    let mut up = Launch::start(&file, &args);
    assert_eq!(up.wait().code(), Some(1), "{}", up.final_stderr());
    let err = up.final_stderr();
    assert!(
        err.contains(&format!("the registrar cannot use etcd at {url}: etcd refused the credentials")),
        "{err}"
    );
    assert!(!err.contains("starting 2 workers"), "nothing started: {err}");

    with_router_etcd(&file, &etcd);
    let state = dir.path().display().to_string();
    let mut up = Launch::start(&file, &["--state-dir", &state]);
    assert_eq!(up.wait().code(), Some(64), "{}", up.final_stderr());
    assert!(up.final_stderr().contains("[router.etcd] given without etcd endpoints"), "{}", up.stderr());
    assert!(workers(&etcd).is_empty());
}

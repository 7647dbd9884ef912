//! The etcd flags at start: security with a plain `http://` endpoint, a half pair or an
//! unreadable file stops control with exit 64 naming the flag; a secured etcd that refuses
//! control's credentials stops it with exit 1 naming etcd and the cause.

use std::process::{Command, Stdio};

use infera_registry::roles::CONTROL;
use infera_testkit::etcd::{Auth, EtcdServer};

fn control(args: &[String]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_infera-control"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(args)
        .env("INFERA_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn args(etcd: &str, flags: Vec<String>) -> Vec<String> {
    [vec!["--etcd".to_owned(), etcd.to_owned()], flags].concat()
}

#[test]
fn etcd_security_that_cannot_work_exits_64_naming_the_flag() {
    let etcd = EtcdServer::start_secure();
    let flags = etcd.flags_as(CONTROL.name, Auth::Password);
    let plain = etcd.url().replacen("https://", "http://", 1);
    let (code, err) = control(&args(&plain, flags.clone()));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains(&format!("etcd endpoint {plain} is not https://")), "{err}");

    let mut missing = flags.clone();
    let at = missing.iter().position(|f| f == "--etcd-password-file").unwrap();
    missing[at + 1] = "/nonexistent/password".into();
    let (code, err) = control(&args(&etcd.url(), missing));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--etcd-password-file /nonexistent/password: cannot read it"), "{err}");

    let half: Vec<String> = flags.iter().take_while(|f| *f != "--etcd-key").cloned().collect();
    let (code, err) = control(&args(&etcd.url(), half));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--etcd-key"), "{err}");
}

#[test]
fn credentials_a_secured_etcd_refuses_stop_control_with_the_cause() {
    let etcd = EtcdServer::start_secure();
    let wrong = etcd.dir().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let mut flags = etcd.flags_as(CONTROL.name, Auth::Password);
    let at = flags.iter().position(|f| f == "--etcd-password-file").unwrap();
    flags[at + 1] = wrong.display().to_string();
    let (code, err) = control(&args(&etcd.url(), flags));
    assert_eq!(code, 1, "{err}");
    let expected =
        format!("etcd at {} refused control (user infera-control): etcd refused the credentials", etcd.url());
    assert!(err.contains(&expected), "{err}");
    // A user without control's role (by its certificate) is refused too.
    let (code, err) = control(&args(&etcd.url(), etcd.flags_as("infera-launch", Auth::Certificate)));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("refused control: etcd denied the request"), "{err}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert!(rt.block_on(etcd.infera_keys()).is_empty(), "nothing written");
}

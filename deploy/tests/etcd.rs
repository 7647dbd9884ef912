//! `deploy/etcd/infera-etcd-roles.sh`, the script operators run to give each part its etcd role:
//! it is what `infera_registry::roles` generates (`INFERA_BLESS=1` rewrites it), and run with the
//! real etcdctl against an etcd with TLS and client certificates required it turns auth on with
//! every part able to do its work and nothing else, twice in a row, by certificate or password.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use infera_proto::types::WorkerRecord;
use infera_registry::roles::{CONTROL, LAUNCH};
use infera_registry::{EtcdFailure, Registration, keys};
use infera_testkit::etcd::{Auth, EtcdServer, Intruder};

fn script() -> std::path::PathBuf {
    infera_deploy::dir().join("etcd/infera-etcd-roles.sh")
}

#[test]
fn the_roles_script_is_what_the_registry_generates() {
    let generated = infera_registry::roles::script::etcdctl();
    if std::env::var_os("INFERA_BLESS").is_some() {
        std::fs::write(script(), &generated).unwrap();
    }
    let file = std::fs::read_to_string(script()).unwrap();
    assert!(
        file == generated,
        "{} is stale: INFERA_BLESS=1 cargo test -p infera-deploy --test etcd",
        script().display()
    );
}

/// Runs the script as etcd's root (`PASSWORD_DIR` when given).
fn run(etcd: &EtcdServer, passwords: Option<&Path>) {
    let mut sh = Command::new("sh");
    sh.arg(script()).envs(etcd.etcdctl_env());
    if let Some(dir) = passwords {
        sh.env("PASSWORD_DIR", dir);
    }
    let out = sh.output().expect("sh runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the script failed (etcdctl comes with Debian's etcd-client):\n{text}");
}

#[test]
fn the_roles_script_gives_each_part_its_role_and_nothing_more() {
    let etcd = EtcdServer::start_tls_only();
    run(&etcd, None);
    run(&etcd, None);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        // Control, by its certificate: settings written and read; no worker record.
        let control = etcd.client_as(CONTROL.name, Auth::Certificate);
        infera_registry::config::store(&control, &[("decode_input_demand", "on".into())]).await.unwrap();
        assert!(infera_registry::config::load(&control).await.unwrap().contains_key("decode_input_demand"));
        let mut c = infera_registry::connect(&control).await.unwrap();
        let e = c.put(format!("{}x", keys::WORKERS), "{}", None).await.unwrap_err();
        assert_eq!(EtcdFailure::of(&e), EtcdFailure::PermissionDenied, "{e}");
        // The registrar, by its certificate: registers and deregisters; reads nothing.
        let record = WorkerRecord::decode("decode-0", "http://127.0.0.1:30001", "m", 1);
        let reg = Registration::start(
            etcd.client_as(LAUNCH.name, Auth::Certificate),
            record,
            Duration::from_secs(5),
        );
        infera_testkit::poll(Duration::from_secs(10), "decode-0 registered", async || {
            etcd.infera_keys().await.contains_key("/infera/v1/workers/decode-0")
        })
        .await
        .unwrap();
        // A drain: the registrar puts its request, control reports, the registrar reads it.
        let since = reg.drain().await.expect("registered");
        assert!(etcd.infera_keys().await.contains_key("/infera/v1/drains/decode-0/request"));
        let id = infera_proto::types::WorkerId::new("decode-0");
        infera_registry::drain::report(&mut c, &id, 0).await.unwrap();
        let launch = etcd.client_as(LAUNCH.name, Auth::Certificate);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let drained = infera_registry::drain::wait_drained(&launch, &id, since, deadline).await;
        assert_eq!(drained, infera_registry::drain::Drained::Empty);
        reg.stop().await;
        assert!(!etcd.infera_keys().await.contains_key("/infera/v1/workers/decode-0"), "revoked");
        assert!(
            !etcd.infera_keys().await.contains_key("/infera/v1/drains/decode-0/request"),
            "with the lease"
        );
        let e =
            infera_registry::config::load(&etcd.client_as(LAUNCH.name, Auth::Certificate)).await.unwrap_err();
        assert_eq!(e.failure(), Some(EtcdFailure::PermissionDenied), "{e}");
        // Auth is on: a certificate of the CA alone (no such user) writes nothing.
        let e = etcd.write_as(Intruder::UnknownUser, keys::CONTROL_LEADER, "x").await.unwrap_err();
        assert_eq!(e.failure(), Some(EtcdFailure::PermissionDenied), "{e}");
        etcd.assert_intruders_write_nothing().await;
    });
}

#[test]
fn with_password_dir_the_users_get_their_passwords_and_a_rerun_rotates_them() {
    let etcd = EtcdServer::start_tls_only();
    run(&etcd, Some(&etcd.password_dir()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let control = etcd.client_as(CONTROL.name, Auth::Password);
    rt.block_on(infera_registry::config::load(&control)).expect("control by password");
    let file = etcd.password_file(CONTROL.name);
    std::fs::write(&file, "rotated-password\n").unwrap();
    run(&etcd, Some(&etcd.password_dir()));
    rt.block_on(infera_registry::config::load(&control)).expect("the rotated password, from the same file");
    rt.block_on(etcd.assert_intruders_write_nothing());
}
